"""The shipped Kubernetes manifests (deploy/k8s/) agree with what the server reads and does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from brisvox.__main__ import build_parser
from brisvox.server.settings import VARIABLES, Settings

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"


def _docs(name: str) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all((K8S / name).read_text()) if d}


def _container() -> dict[str, Any]:
    deployment = _docs("brisvox.yaml")["Deployment"]
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def _env() -> dict[str, str]:
    return {e["name"]: e.get("value", "(from a reference)") for e in _container()["env"]}


def test_every_variable_the_manifest_sets_is_one_the_server_reads() -> None:
    read = {v.name for v in VARIABLES}
    assert set(_env()) <= read, set(_env()) - read


def test_the_manifests_settings_parse() -> None:
    plain = {k: v for k, v in _env().items() if v != "(from a reference)" and k != "BRISVOX_REDIS_URL"}
    settings = Settings.from_env({**plain, "BRISVOX_AUTH_SECRET": "x" * 40, "BRISVOX_REDIS_URL": "redis://r:6379/0"})
    assert settings.host == "0.0.0.0" and settings.port == 8765


def test_the_grace_period_covers_the_longest_call_and_every_shutdown_stage() -> None:
    pod = _docs("brisvox.yaml")["Deployment"]["spec"]["template"]["spec"]
    env = _env()
    drain = float(env["BRISVOX_DRAIN_TIMEOUT"])
    assert drain >= float(env["BRISVOX_MAX_CALL_DURATION"])  # a drained pod lets every call end on its own
    stages = drain + Settings().cancel_timeout + Settings().abort_timeout
    pre_stop = _container()["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] >= stages + pre_stop


def test_readiness_is_readyz_and_liveness_is_healthz_on_the_served_port() -> None:
    c = _container()
    port = c["ports"][0]["containerPort"]
    assert port == int(_env()["BRISVOX_PORT"])
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_the_container_arguments_are_ones_brisvox_serve_accepts() -> None:
    args = build_parser().parse_args(["serve", *_container()["args"]])
    assert args.workers == "auto" and str(args.agent_file) == "/etc/brisvox/agent.toml"


def test_the_autoscaler_scales_the_deployment_on_the_active_calls_gauge() -> None:
    hpa = _docs("hpa.yaml")["HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == _docs("brisvox.yaml")["Deployment"]["metadata"]["name"]
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "brisvox_active_calls"


def test_the_redis_service_is_the_one_the_nodes_are_pointed_at() -> None:
    service = _docs("redis.yaml")["Service"]
    assert f"redis://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}/0" == _env()["BRISVOX_REDIS_URL"]
