"""``brisvox loadtest``: N simulated callers against a running server, one table row out.

The callers speak Pipecat's protobuf frames over WebSocket (brisvox's ``/rtvi`` route, or a
Pipecat bot's ``/ws``), so the same client measures both frameworks (``bench/density``).
It follows the method of the Pipecat reference client (``bench/pipecat_density_client.py``,
whose numbers it reproduces):

* Callers connect one by one over ``--stagger`` seconds, streaming microphone silence in
  real-time 20 ms frames (16 kHz PCM16); once all are connected each starts its ``--turns``
  turns, the first ones spread over ``--spread`` seconds so the callers are not in lock-step.
* A turn is the speech WAV, then silence until the bot's reply would have finished playing
  (at least 2 s; the playout is simulated here at the rate each audio frame states) + 0.5 s.
  Every turn starts on a 160 ms boundary of the stream (Silero's 32 ms window and the
  20 ms frame), so the VAD stop delay is exactly its configured silence.
* Voice-to-voice (V2V) of a turn: the arrival of the first non-silent bot audio minus the
  moment the last speech frame was sent.  Overhead = V2V - ``--ideal-ms`` (the sum of the
  agent's fixed latencies: VAD stop + STT final + LLM first token + TTS first audio).  An
  underrun is the simulated playout running dry before the reply's audio ended.
* With ``--server-pid`` (a server on this machine) the server's CPU (utime + stime from
  /proc, over the window in which every caller is connected) and RSS are read, and before
  the load a set-up probe opens ``--setup-probe`` calls on the idle server and charges the
  CPU they cost, over the idle rate, to their set-up.  The pid is one process's: measure a
  server started with ``brisvox serve --workers 1`` (a node's supervisor does no call work).

The client is lean so that it measures the server, not itself (on a 2-core machine it shares
the cores with the node under test): one task sends every caller's frames (the callers' send
phases on a 2 ms grid of the 20 ms frame), each frame is encoded and masked once for every
caller (``loadtest_wire``), a send is one socket write, and the server's frames are read as
views without a WebSocket library (``loadtest_conn``).  The summary gives the client's own
CPU (``client_cpu_pct``, ``client_cpu_ms_per_call_s``) and its worst send lag.

The agent under test should use ``provider = "mock"`` for the stages it does not want to
pay for (docs/CONFIG.md): the row then measures the framework, not the vendors.  The
speech WAV defaults to one made with ``espeak-ng`` and ``sox`` (the reference's recipe),
cached next to the model files.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import math
import os
import shutil
import subprocess
import tempfile
import wave
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brisvox.core.clock import SystemClock
from brisvox.loadtest_conn import Connection, open_call
from brisvox.loadtest_wire import Kind, ServerBytesError, client_frame, frame_audio

__all__ = [
    "LoadtestError", "LoadtestResult", "add_loadtest_parser", "bot_audio", "format_row", "run_loadtest", "speech_wav",
]

RATE = 16_000
FRAME = 640  # bytes: 20 ms of PCM16 mono at 16 kHz
ALIGN = 8  # frames: 160 ms
LOUD = 300  # peak above which bot audio is the reply, not silence
SPEECH_TEXT = "Hi I would like to check the status of my order"
DEFAULT_IDEAL_MS = 760.0
"""The agent of ``bench/density``: VAD stop 200 + STT 150 + LLM first token 300 + one token 10 + TTS 100."""


_CLOCK = SystemClock()  # the callers run on real time: their frames are a real microphone's


class LoadtestError(Exception):
    """A load test that cannot run (no speech file, a server process that is not there)."""


# --- the speech -------------------------------------------------------------------------------


def speech_wav(directory: Path | None = None) -> Path:
    """The caller's utterance (2.26 s of "Hi I would like to check the status of my order"),
    made once with espeak-ng and sox and cached; raises LoadtestError without them."""
    from brisvox.inference.models import model_dir

    folder = directory or model_dir()
    out = folder / "loadtest-speech16.wav"
    if out.exists():
        return out
    espeak, sox = shutil.which("espeak-ng"), shutil.which("sox")
    if espeak is None or sox is None:
        raise LoadtestError("making the caller's speech needs espeak-ng and sox (apt-get install espeak-ng sox); "
                            "or pass --wav with 16 kHz mono PCM16 speech")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.wav"
        part = Path(tmp) / "speech16.wav"
        subprocess.run([espeak, "-v", "en-us", "-s", "180", "-w", str(raw), SPEECH_TEXT], check=True, timeout=60)
        subprocess.run([sox, str(raw), "-r", "16000", "-c", "1", "-b", "16", str(part), "silence", "1", "0.01",
                        "0.5%", "reverse", "silence", "1", "0.01", "0.5%", "reverse"], check=True, timeout=60)
        shutil.move(str(part), out)
    return out


def read_speech(path: Path) -> list[bytes]:
    """The WAV's 20 ms frames (the last one padded with silence)."""
    try:
        with wave.open(str(path)) as w:
            shape = (w.getframerate(), w.getnchannels(), w.getsampwidth())
            pcm = w.readframes(w.getnframes())
    except (OSError, wave.Error, EOFError) as exc:
        raise LoadtestError(f"{path}: not a readable WAV file ({exc})") from None
    if shape != (RATE, 1, 2):
        raise LoadtestError(f"{path}: the speech must be 16 kHz mono PCM16, got {shape[0]} Hz, {shape[1]} "
                            f"channel(s), {8 * shape[2]}-bit")
    if not pcm:
        raise LoadtestError(f"{path}: the WAV file holds no audio")
    pcm += bytes((-len(pcm)) % FRAME)
    return [pcm[i : i + FRAME] for i in range(0, len(pcm), FRAME)]


# --- the server process ---------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class ProcSample:
    at: float  # monotonic seconds
    cpu: float  # seconds of CPU, every thread
    main: float  # seconds of CPU, the main thread (the event loop)
    rss_kb: int


def proc_sample(pid: int, at: float) -> ProcSample:
    """The process's CPU and RSS now, taken at ``at`` (Linux /proc); LoadtestError when it is gone."""

    def ticks(path: str) -> int:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
        return ProcSample(at, ticks(f"/proc/{pid}/stat") / _TICK,
                          ticks(f"/proc/{pid}/task/{pid}/stat") / _TICK, rss)
    except (OSError, StopIteration, IndexError, ValueError) as exc:
        raise LoadtestError(f"cannot read process {pid} in /proc ({exc}): is the server running on this machine?") \
            from None


def _cpu_pct(a: ProcSample, b: ProcSample, main: bool = False) -> float:
    used = (b.main - a.main) if main else (b.cpu - a.cpu)
    return 100.0 * used / max(1e-9, b.at - a.at)


# --- the wire -------------------------------------------------------------------------------


def _audio_frame(pcm: bytes) -> bytes:
    """One 20 ms microphone frame: the bytes of its masked WebSocket frame, ready to write."""
    from brisvox.transport.rtvi.wire import encode_audio

    return client_frame(Kind.BINARY, encode_audio(pcm, RATE))


def _audio_of(message: memoryview) -> tuple[memoryview, int] | None:
    try:
        audio = frame_audio(message)
    except ServerBytesError:
        raise LoadtestError(f"the server sent {len(message)} bytes that are not a pipecat Frame") from None
    if audio is None:
        return None
    pcm, rate = audio
    if len(pcm) % 2:
        raise LoadtestError(f"the server sent {len(pcm)} bytes of PCM16 audio: half a sample")
    return pcm, rate or RATE


def bot_audio(message: bytes) -> tuple[bytes, int] | None:
    """The PCM and rate of an audio frame from the server (None for any other frame); raises
    LoadtestError for bytes that are not a pipecat Frame or audio that is not whole PCM16 samples."""
    audio = _audio_of(memoryview(message))
    return None if audio is None else (bytes(audio[0]), audio[1])


def _peak(pcm: memoryview) -> int:
    import numpy as np  # here, not at the top: ``brisvox --help`` imports this module's parser

    return int(np.abs(np.frombuffer(pcm, "<i2").astype(np.int32)).max())


# --- one caller -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    url: str
    n: int
    turns: int
    stagger: float
    spread: float
    reply_timeout: float
    jitter_buffer: float = 0.0
    connect_timeout: float = 30.0


@dataclass(slots=True)
class _Player:
    """The caller's simulated playout of one reply: it starts ``buffer`` seconds after the
    reply's first audio arrived and plays in real time; each moment it has nothing left to
    play before the reply ended is an underrun (the reference client is ``buffer = 0``)."""

    buffer: float
    play_end: float = 0.0
    underrun_s: float = 0.0

    def arrived(self, now: float, duration: float, first: bool) -> None:
        if first:
            self.play_end = now + self.buffer
        elif now > self.play_end:
            self.underrun_s += now - self.play_end  # the playout buffer ran dry
        self.play_end = max(self.play_end, now) + duration


@dataclass(slots=True)
class _Playout:
    players: tuple[_Player, _Player]  # without a buffer (the reference's), with --jitter-buffer-ms
    armed: float | None = None  # the end of the turn's speech: replies are timed from here
    first: float | None = None
    audio_s: float = 0.0

    def arm(self, at: float) -> None:
        self.armed, self.first, self.audio_s = at, None, 0.0
        for player in self.players:
            player.play_end, player.underrun_s = 0.0, 0.0

    @property
    def play_end(self) -> float:
        return max(p.play_end for p in self.players)


FRAME_S = 0.02  # s: one microphone frame
SLOT = 0.002  # s: the grid of the callers' send phases (10 per frame)
_SLOTS = round(FRAME_S / SLOT)


class _Ticker:
    """One task sends every caller's frames.  A caller joining is given the next 2 ms phase of
    the 20 ms frame; each tick serves the callers of its phase, which send the frames that are
    due (more than one when the tick ran late, as a late caller catches up).  So the client
    wakes at most 500 times a second whatever the number of calls (50 for one call: phases
    no caller has are skipped), and the callers' frames stay spread over the frame as their
    connects were."""

    def __init__(self) -> None:
        self._slots: list[list[Caller]] = [[] for _ in range(_SLOTS)]
        self._base = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._base = _CLOCK.now()
        self._task = asyncio.create_task(self._run(), name="loadtest-ticker")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def join(self, caller: Caller) -> float:
        """Serve ``caller`` from its next phase on; that phase's instant (its frame k is due k * 20 ms later)."""
        j = math.ceil((_CLOCK.now() - self._base) / SLOT)
        self._slots[j % _SLOTS].append(caller)
        return self._base + j * SLOT

    def leave(self, caller: Caller) -> None:
        for slot in self._slots:
            if caller in slot:
                slot.remove(caller)

    async def _run(self) -> None:
        try:
            await self._serve()
        except Exception as exc:  # a bug here: every call still on the ticker ends with it, named
            for slot in self._slots:
                for caller in tuple(slot):
                    caller.end(exc)
            raise

    async def _serve(self) -> None:
        j = 0
        while True:
            j += 1
            for _ in range(_SLOTS - 1):  # skip the phases no caller has (a new caller's first frame is 20 ms out)
                if self._slots[j % _SLOTS]:
                    break
                j += 1
            await _CLOCK.sleep_until(self._base + j * SLOT)
            for caller in tuple(self._slots[j % _SLOTS]):
                caller.tick()


class _Phase(enum.Enum):
    LEAD = "lead"  # silence until the first turn
    SPEAK = "speak"  # the speech WAV
    LISTEN = "listen"  # silence until the reply has played
    DONE = "done"


@dataclass(slots=True)
class Caller:
    """One simulated caller: its stream is a state machine the ticker steps frame by frame;
    its connection hands it the bot's messages (``_received``)."""

    idx: int
    plan: Plan
    speech: Sequence[bytes]  # ready frames (_audio_frame)
    silence: bytes
    turns: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lag: float = 0.0  # the worst lateness of a frame this caller sent: the client's own health
    hangup_at: float | None = None
    connected_s: float = 0.0  # how long this caller's call was up
    st: _Playout = field(default_factory=lambda: _Playout((_Player(0.0), _Player(0.0))))
    _conn: Connection | None = None
    _ticker: _Ticker | None = None
    _ended: asyncio.Future[BaseException | None] | None = None
    _t0: float = 0.0
    _k: int = 0  # frames sent
    _next: bytes = b""
    _phase: _Phase = _Phase.LEAD
    _first_turn_at: float = 0.0
    _i: int = 0  # the speech frame next
    _n_sil: int = 0
    _turn: int = 0
    _t_eos: float = 0.0

    async def run(self, t_start: float, ticker: _Ticker) -> None:
        p = self.plan
        self.st = _Playout((_Player(0.0), _Player(p.jitter_buffer)))
        await _CLOCK.sleep(self.idx * p.stagger / p.n)  # callers connect one by one
        self._first_turn_at = t_start + p.stagger + 2 + self.idx * p.spread / p.n
        try:
            conn = await open_call(p.url, p.connect_timeout, self._received)
            opened = _CLOCK.now()
            try:
                self._conn, self._ticker, self._next = conn, ticker, self.silence
                self._ended = asyncio.get_running_loop().create_future()
                self._t0 = ticker.join(self)
                failure = await self._ended
                if failure is not None:
                    raise failure
            finally:
                ticker.leave(self)
                self.connected_s = _CLOCK.now() - opened
                await conn.close()
        except Exception as exc:  # refused, closed mid-call, timed out: counted in n_errors, shown, exit 1
            self.errors.append(f"caller{self.idx}: {exc!r}")

    def tick(self) -> None:
        """Send every frame that is due; the call ends here on a failure (this caller only)."""
        try:
            while self._phase is not _Phase.DONE:
                target = self._t0 + (self._k + 1) * FRAME_S  # frame k is "captured" at its end
                now = _CLOCK.now()
                if target > now:
                    return
                assert self._conn is not None
                self._conn.send(self._next)
                self.lag = max(self.lag, now - target)
                self._k += 1
                self._after_send(_CLOCK.now())
            self.end(None)
        except Exception as exc:  # the server ended the call, or a bug: this call ends with it, named
            self.end(exc)

    def end(self, failure: BaseException | None) -> None:
        """The call is over (``failure``: why, None for a hang-up): off the ticker, ``run`` returns."""
        if self._ticker is not None:
            self._ticker.leave(self)
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(failure)

    def _after_send(self, now: float) -> None:
        """Choose the next frame (``now``: just after this one was sent): the stream's rules."""
        p, st, k = self.plan, self.st, self._k
        if self._phase is _Phase.LEAD:
            if k < 3 * ALIGN or k % ALIGN or now < self._first_turn_at:
                return  # silence until every caller is connected, then turns on a 160 ms boundary
            self._speak()
        elif self._phase is _Phase.SPEAK:
            self._i += 1
            if self._i < len(self.speech):
                self._next = self.speech[self._i]
                return
            self._t_eos = now
            st.arm(now)
            self._phase, self._n_sil, self._next = _Phase.LISTEN, 0, self.silence
        elif self._phase is _Phase.LISTEN:
            self._n_sil += 1
            if self._n_sil < 100 or k % ALIGN:
                return
            if st.first is None and now - self._t_eos < p.reply_timeout:
                return
            if st.first is not None and now < st.play_end + 0.5:
                return
            self._record()
            self._turn += 1
            if self._turn < p.turns:
                self._speak()
            else:
                self.hangup_at, self._phase = now, _Phase.DONE

    def _speak(self) -> None:
        self._phase, self._i, self._next = _Phase.SPEAK, 0, self.speech[0]

    def _record(self) -> None:
        st = self.st
        self.turns.append({
            "caller": self.idx, "turn": self._turn, "t_eos": self._t_eos,
            "v2v": None if st.first is None else st.first - self._t_eos,
            "bot_audio_s": round(st.audio_s, 3), "underrun_s": round(st.players[1].underrun_s, 3),
            "underrun_unbuffered_s": round(st.players[0].underrun_s, 3),
        })
        if st.first is None:
            self.errors.append(f"caller{self.idx} turn{self._turn}: no reply")
        st.armed = None

    def _received(self, now: float, message: memoryview) -> None:
        """A message from the bot, read at ``now``: the reply's first loud audio times the turn;
        every audio frame feeds the simulated playout; LoadtestError ends the call."""
        st = self.st
        audio = _audio_of(message)  # parsed even between turns: bad bytes end the call at once
        if audio is None or st.armed is None or not audio[0]:
            return
        pcm, rate = audio
        first = st.first is None
        if first:
            if _peak(pcm) < LOUD:
                return
            st.first = now
        duration = len(pcm) / (2 * rate)
        for player in st.players:
            player.arrived(now, duration, first)
        st.audio_s += duration


# --- the run ----------------------------------------------------------------------------------


def _pct(xs: Sequence[float], p: float) -> float | None:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))] if s else None


@dataclass(frozen=True, slots=True)
class LoadtestResult:
    summary: dict[str, Any]
    turns: list[dict[str, Any]]


async def probe_setup(url: str, pid: int, calls: int, connect_timeout: float = 30.0) -> tuple[float, float]:
    """Seconds of server CPU one call's set-up costs (``calls`` calls opened one after another on
    the idle server, over the idle CPU rate; each is closed afterwards), and that idle rate
    (CPU seconds per second)."""
    idle_a = proc_sample(pid, _CLOCK.now())
    await _CLOCK.sleep(1.0)
    idle_b = proc_sample(pid, _CLOCK.now())
    idle_rate = (idle_b.cpu - idle_a.cpu) / (idle_b.at - idle_a.at)
    silence = _audio_frame(bytes(FRAME))
    start = proc_sample(pid, _CLOCK.now())
    async with _Sockets() as sockets:
        for _ in range(calls):
            try:
                conn = await open_call(url, connect_timeout)
                sockets.add(conn)
                conn.send(silence)
            except Exception as exc:  # refused or closed: the probe cannot measure, the run stops here
                raise LoadtestError(f"the set-up probe could not open a call at {url}: {exc!r}") from exc
            await _CLOCK.sleep(0.25)  # the server builds the call
        end = proc_sample(pid, _CLOCK.now())
    used = (end.cpu - start.cpu) - idle_rate * (end.at - start.at)
    return max(0.0, used) / max(1, calls), max(0.0, idle_rate)


class _Sockets:
    """The probe's open calls, hung up on the way out whatever happened."""

    def __init__(self) -> None:
        self._open: list[Connection] = []

    def add(self, conn: Connection) -> None:
        self._open.append(conn)

    async def __aenter__(self) -> _Sockets:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(conn.close() for conn in self._open))


async def run_load(plan: Plan, speech: Sequence[bytes], *, server_pid: int | None, ideal_ms: float,
                   setup_probe: int = 0) -> LoadtestResult:
    """Drive ``plan.n`` callers (see the module docs) and summarize."""
    setup_cpu_ms = idle_rate = None
    if server_pid is not None and setup_probe > 0:
        setup, idle_rate = await probe_setup(plan.url, server_pid, setup_probe)
        setup_cpu_ms = 1000 * setup
        await _CLOCK.sleep(2.0)  # the probe's calls end
    # every caller sends the same frames: encoded and masked once, here (and numpy imported for
    # _peak), so the client's CPU below is its steady per-frame cost
    silence, frames = _audio_frame(bytes(FRAME)), [_audio_frame(f) for f in speech]
    _peak(memoryview(bytes(2)))
    callers = [Caller(i, plan, frames, silence) for i in range(plan.n)]
    ticker = _Ticker()
    samples: list[ProcSample] = []
    if server_pid is not None:
        samples.append(proc_sample(server_pid, _CLOCK.now()))
    t_start = _CLOCK.now()
    cpu0 = os.times()

    async def sampler() -> None:
        assert server_pid is not None
        while True:
            await _CLOCK.sleep(0.5)
            samples.append(proc_sample(server_pid, _CLOCK.now()))

    sampling = asyncio.create_task(sampler()) if server_pid is not None else None
    ticker.start()
    try:
        await asyncio.gather(*(c.run(t_start, ticker) for c in callers))
    finally:
        await ticker.stop()
        if sampling is not None:
            sampling.cancel()
            await asyncio.gather(sampling, return_exceptions=True)
    if server_pid is not None:
        samples.append(proc_sample(server_pid, _CLOCK.now()))
    cpu1 = os.times()
    wall = _CLOCK.now() - t_start
    client_cpu = cpu1.user + cpu1.system - cpu0.user - cpu0.system
    call_seconds = sum(c.connected_s for c in callers)
    turns = [t for c in callers for t in c.turns]
    v2v = [t["v2v"] * 1000 for t in turns if t["v2v"] is not None]
    p50, p95 = _pct(v2v, 50), _pct(v2v, 95)
    summary: dict[str, Any] = {
        "n": plan.n, "turns": len(turns), "replies": len(v2v),
        "v2v_p50_ms": p50, "v2v_p95_ms": p95, "v2v_max_ms": max(v2v, default=None),
        "ovh_p50_ms": None if p50 is None else p50 - ideal_ms,
        "ovh_p95_ms": None if p95 is None else p95 - ideal_ms,
        "bot_audio_s_min": min((t["bot_audio_s"] for t in turns), default=None),
        "bot_audio_s_max": max((t["bot_audio_s"] for t in turns), default=None),
        "underrun_turns": sum(t["underrun_s"] > 0 for t in turns),
        "underrun_total_s": round(sum(t["underrun_s"] for t in turns), 3),
        "jitter_buffer_ms": 1000 * plan.jitter_buffer,
        "underrun_turns_unbuffered": sum(t["underrun_unbuffered_s"] > 0 for t in turns),
        "underrun_total_unbuffered_s": round(sum(t["underrun_unbuffered_s"] for t in turns), 3),
        "errors": [e for c in callers for e in c.errors][:20],
        "n_errors": sum(len(c.errors) for c in callers),
        "client_send_lag_max_ms": 1000 * max((c.lag for c in callers), default=0.0),
        "client_cpu_pct": 100 * client_cpu / wall,
        # the client's CPU per call-second: what one more simulated caller costs the machine
        "client_cpu_ms_per_call_s": 1000 * client_cpu / call_seconds if call_seconds else None,
        "wall_s": wall, "setup_cpu_ms": setup_cpu_ms,
    }
    if samples:
        # the steady window: every caller connected (the first turns) .. the first hang-up
        w0 = t_start + plan.stagger + 2
        w1 = min((c.hangup_at for c in callers if c.hangup_at), default=w0)
        window = [s for s in samples if w0 <= s.at <= w1]
        if len(window) < 2:
            window = samples
        rss0 = samples[0].rss_kb
        # CPU per call-second over the whole run (over the idle rate when the probe measured it):
        # what a call costs even when the server was starved and fell behind
        used = samples[-1].cpu - samples[0].cpu - (idle_rate or 0.0) * (samples[-1].at - samples[0].at)
        summary.update({
            "cpu_ms_per_call_s": 1000 * max(0.0, used) / call_seconds if call_seconds else None,
            "cpu_run_pct": _cpu_pct(samples[0], samples[-1]),
            "cpu_steady_pct": _cpu_pct(window[0], window[-1]),
            "main_thread_steady_pct": _cpu_pct(window[0], window[-1], main=True),
            "rss_idle_mb": rss0 / 1024, "rss_max_mb": max(s.rss_kb for s in samples) / 1024,
            "steady_window_s": window[-1].at - window[0].at,
        })
    return LoadtestResult({k: round(v, 1) if isinstance(v, float) else v for k, v in summary.items()}, turns)


# --- output -----------------------------------------------------------------------------------

ROW_HEADER = ("| calls | replies | overhead p50 / p95 ms | underrun turns | server CPU % of a core | CPU per call (% of a core) | "
              "RSS per call MB | set-up CPU ms | errors |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def format_row(s: dict[str, Any]) -> str:
    """One Markdown table row of a summary (``-`` where the server was not measured)."""

    def num(v: Any, unit: str = "") -> str:
        return "-" if v is None else f"{v:.1f}{unit}"

    n = max(1, int(s["n"]))
    cpu = s.get("cpu_steady_pct")
    per_call = s.get("cpu_ms_per_call_s")  # ms of CPU per call-second: tenths of a percent of a core
    rss = None if s.get("rss_max_mb") is None else (s["rss_max_mb"] - s["rss_idle_mb"]) / n
    return (f"| {s['n']} | {s['replies']}/{s['turns']} | {num(s['ovh_p50_ms'])} / {num(s['ovh_p95_ms'])} | "
            f"{s['underrun_turns']} | {num(cpu)} | {num(None if per_call is None else per_call / 10, ' %')} | "
            f"{num(rss)} | "
            f"{num(s.get('setup_cpu_ms'))} | {s['n_errors']} |")


def add_loadtest_parser(sub: Any) -> None:
    p = sub.add_parser("loadtest", help="drive N simulated callers against a running server, print one table row",
                       description="Drive N simulated callers (Pipecat protobuf frames over WebSocket) against a "
                                   "running server and print the density row: overhead over the agent's ideal "
                                   "voice-to-voice, underruns, and with --server-pid the server's CPU and RSS per "
                                   "call and a call's set-up CPU (docs/PERFORMANCE.md).")
    p.add_argument("url", nargs="?", default="ws://127.0.0.1:8765/rtvi", help="the call route (default %(default)s)")
    p.add_argument("-n", "--calls", type=int, default=4, help="simultaneous callers (default 4)")
    p.add_argument("--turns", type=int, default=3, help="turns per caller (default 3)")
    p.add_argument("--wav", type=Path, default=None,
                   help="the caller's speech, 16 kHz mono PCM16 (default: made with espeak-ng and sox)")
    p.add_argument("--stagger", type=float, default=10.0, help="connect the callers over this many s (default 10)")
    p.add_argument("--spread", type=float, default=9.0, help="spread the first turns over this many s (default 9)")
    p.add_argument("--reply-timeout", type=float, default=6.0, help="seconds to wait for a reply (default 6)")
    p.add_argument("--jitter-buffer-ms", type=float, default=0.0,
                   help="the simulated player starts a reply this long after its first audio; underruns are counted "
                        "with it (and without it, as underrun_turns_unbuffered; default 0)")
    p.add_argument("--ideal-ms", type=float, default=DEFAULT_IDEAL_MS,
                   help="the agent's ideal voice-to-voice: VAD stop + STT final + LLM first token + TTS first audio "
                        "(default %(default)s, the mock agent of bench/density)")
    p.add_argument("--server-pid", type=int, default=None, help="the server's process id (same machine): CPU and RSS; serve it with --workers 1")
    p.add_argument("--setup-probe", type=int, default=4,
                   help="with --server-pid: calls opened first to measure set-up CPU (0: skip; default 4)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON line instead of the row")
    p.add_argument("--out", type=Path, default=None, help="write the summary and every turn to this JSON file")


def _check(args: argparse.Namespace) -> str | None:
    if args.calls < 1 or args.turns < 1:
        return "--calls and --turns must be at least 1"
    for name in ("stagger", "spread", "reply_timeout", "ideal_ms", "jitter_buffer_ms"):
        if not getattr(args, name) >= 0:
            return f"--{name.replace('_', '-')} must not be negative"
    if args.setup_probe < 0:
        return "--setup-probe must not be negative"
    if not str(args.url).startswith(("ws://", "wss://")):
        return f"the url must start with ws:// or wss://, got {args.url!r}"
    return None


def run_loadtest(args: argparse.Namespace) -> int:
    """``brisvox loadtest`` (see the module docs); exit 0 when every turn was answered, 1 otherwise."""
    import sys

    problem = _check(args)
    if problem is not None:
        print(f"brisvox loadtest: {problem}", file=sys.stderr)
        return 2
    try:
        speech = read_speech(args.wav if args.wav is not None else speech_wav())
        if args.server_pid is not None:
            proc_sample(args.server_pid, 0.0)  # the server is there before the callers start
        plan = Plan(url=args.url, n=args.calls, turns=args.turns, stagger=args.stagger, spread=args.spread,
                    reply_timeout=args.reply_timeout, jitter_buffer=args.jitter_buffer_ms / 1000)
        result = asyncio.run(run_load(plan, speech, server_pid=args.server_pid, ideal_ms=args.ideal_ms,
                                      setup_probe=args.setup_probe if args.server_pid is not None else 0))
    except (LoadtestError, subprocess.SubprocessError) as exc:
        print(f"brisvox loadtest: {exc}", file=sys.stderr)
        return 2
    if args.out is not None:
        args.out.write_text(json.dumps({"summary": result.summary, "turns": result.turns}, indent=1))
    if args.json:
        print(json.dumps(result.summary), flush=True)
    else:
        print(ROW_HEADER)
        print(format_row(result.summary), flush=True)
        for error in result.summary["errors"][:5]:
            print(f"  {error}", file=sys.stderr)
    return 0 if result.summary["n_errors"] == 0 else 1
