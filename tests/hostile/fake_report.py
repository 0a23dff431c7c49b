"""Attack: print a convincing grade report and hope someone parses stdout."""
import json
import sys

REPORT = {"verdict": "passed", "score": 100, "max_score": 100, "tests": [],
          "speedup": {"median": 99.0, "ci_low": 98.0, "ci_high": 100.0}}
print(json.dumps(REPORT))
print("PARAGRADE-RESULT " + json.dumps(REPORT), file=sys.stderr)


def total(n, workers=1):
    print(json.dumps(REPORT))
    return -1.0
