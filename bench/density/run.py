"""Density head-to-head: Pipecat 1.14 and brisvox, the same client, in one run.

For each framework and each N a fresh server is started pinned to core 0 (``taskset -c 0``:
every thread of it, the VAD's included), and ``brisvox loadtest`` drives N callers from
core 1 (``taskset -c 1``): the same client, speaking Pipecat's protobuf frames, for both.

* Pipecat: ``pipecat_server.py`` (the reference bot of /work/shared/bench, unchanged) in
  its own virtual environment (``--pipecat-venv``, created with pipecat-ai 1.14.0 when
  missing), on ``/ws``.
* brisvox: ``brisvox serve agent.toml`` on ``/rtvi``: mock providers with the reference's
  latencies (STT final 150 ms after the VAD stop, LLM first token 300 ms then 10 ms per
  word, TTS first audio 100 ms), Silero VAD with Pipecat's parameters (6-window start and
  stop), no Smart Turn (the reference has none), logging at WARNING (as the reference).

Ideal voice-to-voice 760 ms for both; a point passes when every turn was answered, the p95
overhead is under 100 ms and no turn had an underrun with a 40 ms client jitter buffer
(the reference client has none: Pipecat sends its audio at twice real time, brisvox one
20 ms frame ahead of real time, so an unbuffered client counts every late wake-up of a
brisvox reply; both counts are in the JSON).  The table: calls per core (the largest
passing N; ">=" when no larger N was measured), overhead p50/p95 at one call, CPU and RSS per call at that N, and a call's
set-up CPU (the loadtest's probe: 4 calls opened on the idle server).

    python bench/density/run.py                      # the full sweep (about 25 minutes)
    python bench/density/run.py --quick              # 2 turns per caller, fewer points
    python bench/density/run.py --brisvox-ns 1,20,40 --pipecat-ns 1,6 --turns 3

Results go to ``--out`` (default bench/density/results/<UTC time>/): one JSON line per
point (summary.jsonl), the servers' logs, and table.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SRC = ROOT / "src"
sys.path.insert(0, str(SRC))  # this checkout's brisvox

from brisvox.loadtest import speech_wav as speech_wav  # noqa: E402  (workers.py takes it from here)

PIPECAT_REQUIREMENTS = ("pipecat-ai==1.14.0", "websockets", "fastapi<1,>=0.115.6", "uvicorn<1.0.0,>=0.32.0")
JITTER_BUFFER_MS = 40.0
OVERHEAD_LIMIT_MS = 100.0
PORT = 8790  # the servers' port: --port (use_port) when another bench on the machine has it


def use_port(port: int) -> None:
    """Serve the benches' servers on ``port`` from now on."""
    global PORT
    PORT = port


def _check_port_free() -> None:
    # a server that cannot bind exits, but a server another bench left on the port would answer
    # the readiness check and be measured in its place: refuse to start instead
    import socket

    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers: a closed call's TIME_WAIT is no server
        try:
            probe.bind(("127.0.0.1", PORT))
        except OSError as exc:
            raise RuntimeError(f"port {PORT} is in use ({exc}): another server is there; pass --port") from None
FULL = {"pipecat": "1:12,2:9,4:6,6:6,8:6,10:6,12:6,14:6,16:3,20:3,24:3", "brisvox": "1:12,10:6,20:6,40:6,60:6,80:6,100:3,120:3,150:3"}
QUICK = {"pipecat": "1:3,4:2,6:2,8:2", "brisvox": "1:3,10:2,20:2,40:2,60:2"}


def ensure_pipecat_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if python.exists():
        return python
    print(f"creating {venv} with {' '.join(PIPECAT_REQUIREMENTS)}", flush=True)
    subprocess.run([sys.executable if sys.version_info[:2] == (3, 11) else "python3", "-m", "venv", str(venv)],
                   check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *PIPECAT_REQUIREMENTS], check=True)
    return python


def _wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            if url.endswith(f":{PORT}/"):  # the reference bot answers / with 404 once it listens
                return
            print(f"waiting for {url}: {exc}", file=sys.stderr)
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the server was not ready at {url} within {timeout} s")


@contextlib.contextmanager
def server(framework: str, pipecat_python: Path, log: Path, loop: str, vad_batch: str, *, workers: int = 1,
           cpus: str | None = "0", agent: Path = HERE / "agent.toml", src: Path = SRC) -> Iterator[tuple[int, str]]:
    """A fresh server pinned to ``cpus`` (None: not pinned): (its pid, the call URL).  brisvox serves
    with ``--workers workers`` from ``src``; with more than one the pid is the node's supervisor."""
    env = dict(os.environ)
    if framework == "pipecat":
        cmd = [str(pipecat_python), str(HERE / "pipecat_server.py"), "--port", str(PORT)]
        ready, url = f"http://127.0.0.1:{PORT}/", f"ws://127.0.0.1:{PORT}/ws"
    else:
        python = [sys.executable]
        if loop == "uvloop":
            python += ["-c", "import runpy, sys, uvloop; uvloop.install(); sys.argv[0] = 'brisvox'; "
                             "runpy.run_module('brisvox', run_name='__main__')"]
        else:
            python += ["-m", "brisvox"]
        cmd = [*python, "serve", "--workers", str(workers), str(agent)]  # 1: its pid is the one measured
        env.update(PYTHONPATH=str(src), BRISVOX_PORT=str(PORT), BRISVOX_MAX_CALLS="1000", BRISVOX_LOG_LEVEL="WARNING",
                   BRISVOX_VAD_BATCH=vad_batch, BRISVOX_SMART_TURN_PATH=str(HERE / "no-smart-turn.onnx"))  # the reference runs no Smart Turn
        for name in ("BRISVOX_AGENT_FILE", "BRISVOX_AUTH", "BRISVOX_HOST"):
            env.pop(name, None)
        ready, url = f"http://127.0.0.1:{PORT}/readyz", f"ws://127.0.0.1:{PORT}/rtvi"
    _check_port_free()
    with log.open("wb") as out:
        pin = ["taskset", "-c", cpus] if cpus is not None else []
        proc = subprocess.Popen([*pin, *cmd], stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            _wait_http(ready, 60, proc)
            time.sleep(2)  # let the start-up settle (the reference's method)
            yield proc.pid, url
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def loadtest(label: str, url: str, n: int, turns: int, args: argparse.Namespace, wav: Path, out: Path,
             *, pin: Sequence[str] = (), server_pid: int | None = None) -> dict[str, Any]:
    """Run ``brisvox loadtest`` (``pin``: a command prefix such as taskset) for one point; its summary."""
    cmd = [*pin, sys.executable, "-m", "brisvox", "loadtest", url, "-n", str(n), "--turns", str(turns), "--wav",
           str(wav), "--json", "--jitter-buffer-ms", str(JITTER_BUFFER_MS), "--stagger", str(args.stagger),
           "--spread", str(args.spread), "--out", str(out)]
    if server_pid is not None:
        cmd += ["--server-pid", str(server_pid)]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SRC)},
                          timeout=60 + args.stagger + turns * 20)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{label}: the client printed no summary: {done.stderr[-2000:]}")
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


def agent_file(args: argparse.Namespace) -> Path:
    """The bench's agent file, or (``--vad-gate off``) a copy of it that scores every window, digital
    silence included."""
    if args.vad_gate == "on":
        return HERE / "agent.toml"
    off = args.out / "agent-no-gate.toml"
    off.write_text((HERE / "agent.toml").read_text().replace("[vad]", "[vad]\nskip_silence = false", 1))
    return off


def run_point(framework: str, n: int, turns: int, args: argparse.Namespace, pipecat_python: Path,
              wav: Path) -> dict[str, Any]:
    log = args.out / f"{framework}_n{n}.log"
    with server(framework, pipecat_python, log, args.loop, args.vad_batch, agent=agent_file(args),
                src=args.src) as (pid, url):
        summary = loadtest(f"{framework} n={n}", url, n, turns, args, wav, args.out / f"{framework}_n{n}.json",
                           pin=("taskset", "-c", "1"), server_pid=pid)
    summary["framework"] = framework
    summary["load_before"] = os.getloadavg()[0]
    return summary


def passes(s: dict[str, Any]) -> bool:
    return (s["n_errors"] == 0 and s["replies"] == s["turns"] and s["ovh_p95_ms"] is not None
            and s["ovh_p95_ms"] < OVERHEAD_LIMIT_MS and s["underrun_turns"] == 0)


def _fmt(v: Any, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def table(points: Sequence[dict[str, Any]]) -> str:
    rows = ["| framework | calls per core | overhead at 1 call p50 / p95 ms | CPU per call (of a core) | RSS per call MB | "
            "set-up CPU per call ms |", "| --- | --- | --- | --- | --- | --- |"]
    per: dict[str, dict[str, float]] = {}
    for fw in ("pipecat", "brisvox"):
        mine = sorted((p for p in points if p["framework"] == fw), key=lambda p: p["n"])
        if not mine:
            continue
        # calls per core: the largest N that passes.  One failing smaller point (a single late
        # wake-up on a shared machine) does not cap a framework that passes above it; a largest
        # measured N that passes means the limit was not reached, and the table says so.
        passing = [p for p in mine if passes(p)]
        best = passing[-1] if passing else None
        reached = best is not None and any(p["n"] > best["n"] for p in mine)
        one = next((p for p in mine if p["n"] == 1), None)
        setups = sorted(p["setup_cpu_ms"] for p in mine if p.get("setup_cpu_ms") is not None)
        setup = setups[len(setups) // 2] if setups else None
        cpu = rss = None
        if best is not None:
            cpu = best["cpu_ms_per_call_s"] / 10 if best.get("cpu_ms_per_call_s") is not None else None
            rss = (best["rss_max_mb"] - best["rss_idle_mb"]) / best["n"]
        calls = best["n"] if best is not None else 0
        per[fw] = {"calls": calls, "reached": reached}
        shown = f"{calls}" if reached else f">= {calls} (limit not reached)"
        rows.append(f"| {fw} | {shown} | {_fmt(one and one['ovh_p50_ms'])} / {_fmt(one and one['ovh_p95_ms'])} | "
                    f"{_fmt(cpu)} % | {_fmt(rss, 2)} | {_fmt(setup)} |")
    if per.get("pipecat", {}).get("calls") and "brisvox" in per:
        ratio = per["brisvox"]["calls"] / per["pipecat"]["calls"]
        bound = "" if per["pipecat"]["reached"] else " at most (Pipecat's limit was not reached)"
        rows.append(f"\nbrisvox / Pipecat calls per core: {ratio:.1f}x{bound}")
    rows.append("\nEvery point (overhead = V2V - 760 ms; underruns with a 40 ms client jitter buffer / without one):\n")
    rows.append("| framework | calls | replies | overhead p50 / p95 ms | underrun turns (40 ms / none) | "
                "CPU % of core 0 | main thread % | CPU ms per call-second | RSS idle / max MB | client lag max ms | "
                "load avg | pass |")
    rows.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in points:
        rows.append(f"| {p['framework']} | {p['n']} | {p['replies']}/{p['turns']} | {_fmt(p['ovh_p50_ms'])} / "
                    f"{_fmt(p['ovh_p95_ms'])} | {p['underrun_turns']} / {p['underrun_turns_unbuffered']} | "
                    f"{_fmt(p.get('cpu_steady_pct'))} | {_fmt(p.get('main_thread_steady_pct'))} | "
                    f"{_fmt(p.get('cpu_ms_per_call_s'), 2)} | "
                    f"{_fmt(p.get('rss_idle_mb'))} / {_fmt(p.get('rss_max_mb'))} | "
                    f"{_fmt(p['client_send_lag_max_ms'])} | {_fmt(p['load_before'], 2)} | "
                    f"{'yes' if passes(p) else 'no'} |")
    return "\n".join(rows)


def record(sink: IO[str], points: list[dict[str, Any]], summary: dict[str, Any], label: str, extra: str) -> None:
    """Keep one point: in ``points``, as a JSON line in ``sink``, and as one line on stdout."""
    points.append(summary)
    sink.write(json.dumps(summary) + "\n")
    sink.flush()
    print(f"{label}: ovh p50/p95 {summary['ovh_p50_ms']}/{summary['ovh_p95_ms']} ms, underruns "
          f"{summary['underrun_turns']}, {extra} -> {'pass' if passes(summary) else 'FAIL'}", flush=True)


def machine() -> str:
    """The CPU model and the number of cores."""
    out = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo; nproc"], capture_output=True, text=True)
    return out.stdout.strip().replace("\n", ", ")


def _points(spec: str) -> list[tuple[int, int]]:
    out = []
    for item in spec.split(","):
        n, _, t = item.partition(":")
        out.append((int(n), int(t) if t else 6))
    return out


def report(out: Path, text: str) -> int:
    """Write the run's table (``out``/table.md) and print it."""
    (out / "table.md").write_text(text)
    print(text)
    return 0


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The options every density bench has: how the callers arrive, and where the results go."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stagger", type=float, default=10.0, help="connect the callers over this many s")
    ap.add_argument("--spread", type=float, default=9.0, help="spread the first turns over this many s")
    ap.add_argument("--out", type=Path, default=None, help="the results folder (default: under bench/density/results/, named by the UTC time)")
    ap.add_argument("--port", type=int, default=PORT, help="the servers' port on 127.0.0.1 (default %(default)s)")
    return ap


def results_dir(args: argparse.Namespace, prefix: str) -> str:
    """Make ``args.out`` (by default results/<prefix><UTC time>); the time stamp."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    args.out = args.out or HERE / "results" / f"{prefix}{stamp}"
    args.out.mkdir(parents=True, exist_ok=True)
    return str(stamp)


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer points, fewer turns (a check, not the result)")
    ap.add_argument("--pipecat-ns", default=None, help="N:turns,... for Pipecat (default: the reference's sweep)")
    ap.add_argument("--brisvox-ns", default=None, help="N:turns,... for brisvox")
    ap.add_argument("--turns", type=int, default=None, help="turns per caller at every N (overrides N:turns)")
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="brisvox's event loop")
    ap.add_argument("--vad-batch", choices=("on", "off"), default="on", help="brisvox's BRISVOX_VAD_BATCH")
    ap.add_argument("--vad-gate", choices=("on", "off"), default="on",
                    help="brisvox's [vad] skip_silence (on: the default)")
    ap.add_argument("--vad-period", default=None,
                    help="brisvox's BRISVOX_VAD_PERIOD (e.g. 0 or 10ms; default: the server's, 10 ms)")
    ap.add_argument("--frameworks", default="pipecat,brisvox")
    ap.add_argument("--src", type=Path, default=SRC, help="the brisvox build the server runs (another checkout's src/)")
    ap.add_argument("--pipecat-venv", type=Path, default=Path("/work/venv-pipecat"))
    args = ap.parse_args()
    if args.vad_period is not None:  # the server inherits this process's environment
        os.environ["BRISVOX_VAD_PERIOD"] = args.vad_period
    stamp = results_dir(args, "")
    use_port(args.port)
    specs = QUICK if args.quick else FULL
    frameworks = args.frameworks.split(",")
    pipecat_python = ensure_pipecat_venv(args.pipecat_venv) if "pipecat" in frameworks else Path()
    wav = speech_wav(args.out)
    points: list[dict[str, Any]] = []
    with (args.out / "summary.jsonl").open("a") as sink:
        for fw in frameworks:
            spec = getattr(args, f"{fw}_ns") or specs[fw]
            for n, turns in _points(spec):
                summary = run_point(fw, n, args.turns or turns, args, pipecat_python, wav)
                record(sink, points, summary, f"{fw} n={n}", f"cpu {summary.get('cpu_steady_pct')} %, errors "
                                                              f"{summary['n_errors']}")
    text = (f"# Density, {stamp}\n\nMachine: {machine()}; server on core 0, client on core 1; load average at the "
            f"end {os.getloadavg()}; brisvox loop {args.loop}, VAD batching {args.vad_batch}, silence skip {args.vad_gate}, VAD period "
            f"{os.environ.get('BRISVOX_VAD_PERIOD', '10ms')}.\n\n{table(points)}\n")
    return report(args.out, text)


if __name__ == "__main__":
    sys.exit(main())
