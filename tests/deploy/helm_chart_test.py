"""The Helm chart (deploy/helm/kiln) renders into valid Kubernetes objects: N kilnd replicas
in a StatefulSet whose pods have stable DNS names through a headless service, each given
--fleet (all of them) and --advertise (its own, inside --fleet, as kilnd requires), a volume
per replica, health probes, tokens from a Secret, and a shared tier that is either an
existing Redis Cluster or one the chart deploys and joins with `redis-cli --cluster create`.

helm itself is not needed: tests/deploy/helm_render.py renders the subset of templates the
chart uses (and refuses anything else). With helm on the PATH, `helm template` must render
the chart as well.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "client" / "python"))

from helm_render import render_chart  # noqa: E402

from kiln.fleet import fleet_order, parse_fleet  # noqa: E402

CHART = HERE.parents[1] / "deploy" / "helm" / "kiln"


def objects(overrides=None) -> list[dict]:
    rendered = render_chart(CHART, overrides)
    docs = []
    for name, text in rendered.items():
        assert "{{" not in text, name
        if name.endswith(".yaml"):
            docs += [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        assert d["apiVersion"] and d["kind"] and d["metadata"]["name"], d
    return docs


def find(docs, kind, name):
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def kilnd_args(docs) -> list[str]:
    sts = find(docs, "StatefulSet", "kiln-kilnd")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return container["args"]


def flag(args, name):
    values = [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]
    assert len(values) <= 1, (name, args)
    return values[0] if values else None


def test_chart_metadata_and_values_parse():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "kiln"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["replicas"] >= 1


def test_replicas_form_a_fleet_of_stable_pod_names():
    docs = objects({"replicas": 4})
    sts = find(docs, "StatefulSet", "kiln-kilnd")
    assert sts["spec"]["replicas"] == 4
    headless = find(docs, "Service", "kiln-kilnd-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert sts["spec"]["serviceName"] == "kiln-kilnd-headless"
    assert headless["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    args = kilnd_args(docs)
    fleet = parse_fleet(flag(args, "--fleet"))
    names = [f"kiln-kilnd-{i}.kiln-kilnd-headless.ml.svc.cluster.local:50051" for i in range(4)]
    assert fleet == names
    # Kubernetes expands $(POD_NAME) from the env the container declares; every pod's
    # address is then in --fleet, which kilnd checks at start.
    advertise = flag(args, "--advertise")
    env = sts["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in env
    for i in range(4):
        assert advertise.replace("$(POD_NAME)", f"kiln-kilnd-{i}") in fleet
    # Jobs spread over the replicas.
    owners = {fleet_order(f"job-{n}", fleet)[0] for n in range(64)}
    assert owners == set(fleet)
    # NOTES print the KILN_SERVER that lists the same fleet.
    notes = render_chart(CHART, {"replicas": 4})["NOTES.txt"]
    assert f"KILN_SERVER={','.join(names)}" in notes


def test_each_replica_has_a_volume_and_health_probes():
    docs = objects()
    sts = find(docs, "StatefulSet", "kiln-kilnd")
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "data", "mountPath": "/var/lib/kiln"} in container["volumeMounts"]
    assert flag(container["args"], "--data-dir") == "/var/lib/kiln"
    assert container["readinessProbe"]["grpc"] == {"port": 50051}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 9464}
    # gRPC probes speak no TLS: with TLS, readiness asks /healthz.
    tls = objects({"tls": {"secretName": "kiln-tls"}})
    container = find(tls, "StatefulSet", "kiln-kilnd")["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert flag(container["args"], "--tls-cert") == "/etc/kiln/tls/tls.crt"


def test_one_replica_has_no_fleet():
    args = kilnd_args(objects({"replicas": 1}))
    assert flag(args, "--fleet") is None and flag(args, "--advertise") is None


def test_tokens_come_from_a_secret():
    docs = objects({"tokens": {"secretName": "kiln-tokens"}})
    spec = find(docs, "StatefulSet", "kiln-kilnd")["spec"]["template"]["spec"]
    assert flag(spec["containers"][0]["args"], "--token-file") == "/etc/kiln/tokens/tokens"
    assert {"name": "tokens", "secret": {"secretName": "kiln-tokens"}} in spec["volumes"]
    assert flag(kilnd_args(objects()), "--token-file") is None


def test_an_existing_redis_cluster():
    url = "redis://redis-0.redis:6379,redis-1.redis:6379"
    docs = objects({"sharedCache": {"url": url}})
    assert flag(kilnd_args(docs), "--shared-cache") == url
    assert not [d for d in docs if d["metadata"]["name"].startswith("kiln-redis")]
    assert flag(kilnd_args(objects()), "--shared-cache") is None


def test_a_deployed_redis_cluster():
    docs = objects({"redis": {"deploy": True, "masters": 3},
                    "sharedCache": {"url": "redis://ignored:6379"}})
    seeds = [f"kiln-redis-{i}.kiln-redis.ml.svc.cluster.local:6379" for i in range(3)]
    assert flag(kilnd_args(docs), "--shared-cache") == "redis://" + ",".join(seeds)
    redis = find(docs, "StatefulSet", "kiln-redis")
    assert redis["spec"]["replicas"] == 3
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--cluster-enabled") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "allkeys-lru"
    assert find(docs, "Service", "kiln-redis")["spec"]["clusterIP"] == "None"
    job = find(docs, "Job", "kiln-redis-cluster-create")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install"
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert "redis-cli --cluster create $nodes --cluster-replicas 0 --cluster-yes" in script
    assert "seq 0 $((3 - 1))" in script


@pytest.mark.skipif(shutil.which("helm") is None, reason="helm is not installed")
def test_helm_template_renders():
    for values in ([], ["--set", "redis.deploy=true"], ["--set", "replicas=1"]):
        subprocess.run(["helm", "template", "kiln", str(CHART), *values], check=True,
                       capture_output=True)
