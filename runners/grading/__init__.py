"""The grading pipeline: the tests (trusted pytest beside the sandbox), the report, a package's
validation, similarity runs.
"""
