"""Where each call lives: this process's calls, and with Redis (a real redis-server) every node's."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import websockets
from websockets.exceptions import InvalidStatus

from brisvox.core.clock import SystemClock
from brisvox.server.directory import HEARTBEAT, CallDirectory, Control, ControlOutcome, RedisLink, owner_id
from tests.server._nodes import AGENT, Node, free_port, get, metrics_with, until


def test_a_control_request_reaches_a_call_of_this_process_and_not_an_ended_one() -> None:
    directory = CallDirectory("a")
    got: list[Control] = []
    directory.add("c1", got.append)
    assert asyncio.run(directory.control("c1", Control.HANGUP)) == (ControlOutcome.DONE, "a")
    assert got == [Control.HANGUP]
    directory.remove("c1")
    assert asyncio.run(directory.control("c1", Control.HANGUP)) == (ControlOutcome.UNKNOWN, None)


def test_without_a_registry_there_is_no_global_cap() -> None:
    directory = CallDirectory("a", global_max_calls=1)
    directory.add("c1", lambda _: None)
    directory.add("c2", lambda _: None)
    assert not directory.over_global_cap()


def test_the_owner_id_is_the_node_and_the_worker() -> None:
    assert owner_id("pod-7", 1) == "pod-7/1"
    assert owner_id("pod-7", None) == "pod-7"
    assert owner_id(None, None) == socket.gethostname()


@pytest.mark.realtime
def test_an_unreachable_registry_is_counted_and_a_request_for_another_nodes_call_is_unreachable() -> None:
    errors: list[int] = []

    async def scenario() -> tuple[ControlOutcome, str | None]:
        directory = CallDirectory("a", global_max_calls=5, on_error=lambda: errors.append(1))
        async with RedisLink(directory, f"redis://127.0.0.1:{free_port()}/0", SystemClock()):
            outcome = await directory.control("elsewhere", Control.HANGUP)
            await asyncio.sleep(0.3)
        return outcome

    outcome = asyncio.run(scenario())
    assert outcome == (ControlOutcome.UNREACHABLE, None)
    assert len(errors) >= 2  # the request and the heartbeat; both logged, neither raised


# --- two nodes and a real redis-server ---------------------------------------------------------

pytestmark_redis = pytest.mark.skipif(shutil.which("redis-server") is None,
                                      reason="redis-server is not installed (make deps-test installs it)")


@pytest.fixture
def redis_url() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until("redis-server", lambda: _answers(port))
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture
def two_nodes(tmp_path: Path, redis_url: str) -> Iterator[tuple[Node, Node]]:
    agent = tmp_path / "node.toml"
    agent.write_text(AGENT)
    env = {"BRISVOX_REDIS_URL": redis_url, "BRISVOX_GLOBAL_MAX_CALLS": "1"}
    a = Node(agent, env={**env, "BRISVOX_NODE_ID": "node-a"})
    b = Node(agent, env={**env, "BRISVOX_NODE_ID": "node-b"})
    try:
        yield a, b
    finally:
        a.kill()
        b.kill()


async def _open_call(url: str) -> tuple[websockets.ClientConnection, str]:
    """A call that has started; the server's id for it."""
    ws = await websockets.connect(url.replace("http://", "ws://") + "/ws", open_timeout=10)
    await ws.send(json.dumps({"type": "start"}))
    while True:
        message = await asyncio.wait_for(ws.recv(), 10)
        if isinstance(message, str) and (msg := json.loads(message))["type"] == "started":
            return ws, str(msg["call_id"])


async def _stop_reason(ws: websockets.ClientConnection, within: float) -> str | None:
    async with asyncio.timeout(within):
        async for message in ws:
            if isinstance(message, str) and (msg := json.loads(message))["type"] == "stop":
                return str(msg.get("reason"))
    return None


def _post(url: str) -> tuple[int, dict[str, object]]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, method="POST", data=b"")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.realtime
@pytestmark_redis
def test_a_hangup_at_the_wrong_node_reaches_the_call_and_the_global_cap_spans_the_nodes(
        two_nodes: tuple[Node, Node], redis_url: str) -> None:
    a, b = two_nodes

    registry = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=5)

    async def scenario() -> str:
        ws, call_id = await _open_call(a.url)
        for _ in range(100):  # a's engine registers the call as it starts
            if await asyncio.to_thread(registry.get, f"brisvox:call:{call_id}") == "node-a":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("a's call never reached the registry")
        await asyncio.sleep(HEARTBEAT * 1.5)  # b's next beat reads a's load
        with pytest.raises(InvalidStatus) as refused:  # the deployment holds its one call
            await _open_call(b.url)
        assert refused.value.response.status_code == 503
        assert metrics_with(b.url, 'brisvox_admissions_refused_total{reason="at_global_capacity"} 1.0')

        status, body = await asyncio.to_thread(_post, f"{b.url}/api/calls/{call_id}/hangup")
        assert (status, body.get("outcome"), body.get("owner")) == (202, "forwarded", "node-a"), body
        assert await _stop_reason(ws, within=10) is not None  # a's engine ended the call
        await ws.close()
        for _ in range(50):  # gone from the registry once it ended (a's next beat deletes its entry)
            status, _ = await asyncio.to_thread(_post, f"{b.url}/api/calls/{call_id}/hangup")
            if status == 404:
                break
            await asyncio.sleep(0.1)
        assert status == 404

        for _ in range(50):  # a's load reaches Redis at its next beat: b admits again
            try:
                again, _ = await _open_call(b.url)
                await again.close()
                return call_id
            except InvalidStatus:
                await asyncio.sleep(0.2)
        raise AssertionError("b did not admit a call after the deployment's call ended")

    call_id = asyncio.run(scenario())
    assert f"call {call_id}: hangup requested" in a.log()
    assert get(f"{a.url}/healthz")[0] == 200
