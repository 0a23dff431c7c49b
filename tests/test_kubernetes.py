"""The Kubernetes manifests (deploy/kubernetes/), checked where no cluster can run: every core
object against the API's schema (kubernetes-validate, strict: no unknown field), the KEDA
ScaledObject and the runner pods against what the platform needs of them (a grace period longer
than a job, no cluster credential in a pod that runs students' code, egress to the server and
the broker only). No cluster ran them: docs/operators/autoscaling.md says so."""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from runners.protocol import QUEUES
from server.settings import REPO_ROOT

pytestmark = pytest.mark.concurrent
FOLDER = REPO_ROOT / "deploy" / "kubernetes"
VERSION = "1.30"  # the oldest Kubernetes the manifests are for (appArmorProfile is 1.30's)
LONGEST_JOB_S = 1800  # a job's default time limit (server/models/fleet.py Job.time_limit_s)


def documents() -> list[dict[str, Any]]:
    listed = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in FOLDER.glob("*.yaml")
                                    if p.name != "kustomization.yaml")  # none forgotten
    return [d for name in listed for d in yaml.safe_load_all((FOLDER / name).read_text()) if d]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == kind]


def test_every_core_object_is_valid_for_the_api() -> None:
    checked = 0
    for doc in documents():
        if doc["apiVersion"].startswith("keda.sh/"):
            continue  # a custom resource: its own test below
        kubernetes_validate.validate(doc, VERSION, strict=True)
        checked += 1
    assert checked >= 5
    # The check would see a mistake: a misspelt field is refused.
    bad = copy.deepcopy(by_kind("Deployment")[0])
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSION, strict=True)


def _runner() -> dict[str, Any]:
    [d] = [d for d in by_kind("Deployment") if d["metadata"]["name"].startswith("runner")]
    return d


def test_runner_pods_finish_their_grading_and_hold_no_cluster_credential() -> None:
    runner = _runner()
    pod = runner["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > LONGEST_JOB_S + 60
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    [c] = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert "secretKeyRef" in env["PARAGRADE_RUNNER_TOKEN"]["valueFrom"]  # never a literal
    assert not any("value" in e and re.search(r"token|secret|password", e["name"], re.I)
                   for e in c["env"])
    sc = c["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"] and "NET_ADMIN" not in sc["capabilities"]["add"]
    # The API refuses allowPrivilegeEscalation: false beside SYS_ADMIN (a rule no schema holds).
    assert not (sc.get("allowPrivilegeEscalation") is False and "SYS_ADMIN" in sc["capabilities"]["add"])
    assert sc.get("privileged") is not True
    # Guaranteed QoS: whole cores for one timed job at a time.
    assert c["resources"]["requests"] == c["resources"]["limits"]


def test_keda_scales_the_runner_on_what_the_server_counts() -> None:
    [so] = by_kind("ScaledObject")
    runner = _runner()
    spec = so["spec"]
    assert spec["scaleTargetRef"]["name"] == runner["metadata"]["name"]
    assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    assert spec["cooldownPeriod"] >= 60
    [trigger] = spec["triggers"]
    assert trigger["type"] == "prometheus"
    query = trigger["metadata"]["query"]
    # Queued and running, for exactly the queues the runner serves.
    args = runner["spec"]["template"]["spec"]["containers"][0]["args"]
    served = args[args.index("--queues") + 1].split(",")
    assert set(served) <= set(QUEUES)
    for metric in ("paragrade_queue_depth", "paragrade_jobs_running"):
        m = re.search(metric + r'\{queue=~"([^"]+)"\}', query)
        assert m and sorted(m.group(1).split("|")) == sorted(served), query
    assert int(trigger["metadata"]["threshold"]) >= 1


def test_runner_pods_reach_the_server_and_the_broker_only() -> None:
    [policy] = by_kind("NetworkPolicy")
    labels = _runner()["spec"]["template"]["metadata"]["labels"]
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"].items() <= labels.items()
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"] and spec["ingress"] == []
    ports = sorted(p["port"] for rule in spec["egress"] for p in rule["ports"])
    assert ports == [53, 53, 6379, 8000]
    for rule in spec["egress"]:
        assert all("ipBlock" not in to for to in rule["to"])  # no address range, so no internet
    server = next(d for d in by_kind("Deployment") if d["metadata"]["name"] == "server")
    server_labels = server["spec"]["template"]["metadata"]["labels"]
    assert any(to.get("podSelector", {}).get("matchLabels") == server_labels
               for rule in spec["egress"] for to in rule["to"])


def test_the_manifests_hold_no_secret() -> None:
    for path in FOLDER.glob("*.yaml"):
        text = path.read_text()
        assert not re.search(r"(?i)(password|token|secret-key)\s*:\s*\S{8,}", text), path
    assert not by_kind("Secret")  # the operator makes them; never committed

