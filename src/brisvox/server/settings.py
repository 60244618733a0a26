"""Server settings from ``BRISVOX_*`` environment variables.

:meth:`Settings.from_env` reads every variable in :data:`VARIABLES`; an unset or empty
variable takes its default, and each bad value is a :class:`~brisvox.core.errors.ConfigError`
naming the variable and the value (all bad values are reported together).  Durations
are seconds (``"2.5"``), or carry a unit (``"2.5s"``, ``"500ms"``).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brisvox.core.errors import ConfigError, InvalidInput
from brisvox.core.secret import Secret
from brisvox.server.auth import ANY, LOOPBACK_NAMES, MIN_KEY_CHARS, AuthMode, host_name, is_wildcard
from brisvox.server.edge import EdgeConfig
from brisvox.server.session import ShutdownPolicy
from brisvox.transport.telephony.webhook import telnyx_public_key
from brisvox.transport.websocket.config import ServerConfig

__all__ = ["VARIABLES", "Settings", "SettingsError", "Variable"]

_LOG_LEVELS = ("debug", "info", "warning", "error")


class SettingsError(ConfigError):
    """One or more ``BRISVOX_*`` variables are invalid; ``problems`` lists each message."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


_HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9][A-Za-z0-9-]{0,62})*")


def _host(raw: str) -> str:
    try:
        ipaddress.ip_address(raw)
    except ValueError:
        if not _HOSTNAME.fullmatch(raw):
            raise ValueError("expected an IP address or a host name") from None
    return raw


def _int_in(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw, 10)
        except ValueError:
            raise ValueError("expected an integer") from None
        if not low <= value <= high:
            raise ValueError(f"expected {low} to {high}")
        return value

    return parse


def _duration(raw: str) -> float:
    text = raw.strip().lower()
    scale = 1.0
    if text.endswith("ms"):
        text, scale = text[:-2], 0.001
    elif text.endswith("s"):
        text = text[:-1]
    try:
        value = float(text) * scale
    except ValueError:
        raise ValueError("expected a duration in seconds (\"2.5\", \"2.5s\" or \"500ms\")") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError("expected a finite duration >= 0")
    return value


def _positive_duration(raw: str) -> float:
    value = _duration(raw)
    if value <= 0:
        raise ValueError("expected a duration > 0")
    return value


def _audio_rate(raw: str) -> float | None:
    if raw.strip().lower() == "off":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("expected a ratio to real time such as 1.25, or off") from None
    if not (math.isfinite(value) and value >= 1.0):
        raise ValueError("expected a finite ratio >= 1.0 (real time), or off")
    return value


def _path(raw: str) -> str:
    if not raw.startswith("/") or " " in raw:
        raise ValueError("expected a URL path starting with '/'")
    return raw


def _wss_url(raw: str) -> str:
    if not re.fullmatch(r"wss://[A-Za-z0-9.\-]+(:[0-9]{1,5})?/[^\s?#]*", raw):
        raise ValueError("expected wss://host[:port]/path (the URL in the TwiML <Stream url>, no query)")
    return raw


def _https_url(raw: str) -> str:
    if not re.fullmatch(r"https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?/[^\s#]*", raw):
        raise ValueError("expected https://host[:port]/path, exactly as configured at the carrier")
    return raw


def _ed25519_key(raw: str) -> bytes:
    try:
        return telnyx_public_key(raw)
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None
def _ip_list(raw: str) -> tuple[str, ...]:
    hosts = tuple(h.strip() for h in raw.split(",") if h.strip())
    for host in hosts:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"expected IP addresses, comma-separated; {host[:40]!r} is not one") from None
    if not hosts:
        raise ValueError("expected at least one IP address")
    return hosts


def _turn_urls(raw: str) -> tuple[str, ...]:
    urls = tuple(u.strip() for u in raw.split(",") if u.strip())
    for url in urls:
        if not re.fullmatch(r"turns?:[A-Za-z0-9.\-\[\]:]+(\?transport=(udp|tcp))?", url):
            raise ValueError(f"expected turn:host:port[?transport=udp|tcp] URLs, comma-separated; not {url[:60]!r}")
    return urls


def _level(raw: str) -> str:
    level = raw.strip().lower()
    if level not in _LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(_LOG_LEVELS)}")
    return level


def _switch(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("on", "off"):
        raise ValueError("expected on or off")
    return value == "on"


_LOOPS = ("asyncio", "uvloop")


def _loop(raw: str) -> str:
    loop = raw.strip().lower()
    if loop not in _LOOPS:
        raise ValueError(f"expected one of {', '.join(_LOOPS)}")
    if loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise ValueError("uvloop is not installed (pip install 'brisvox[fast]')")
    return loop


def _file(raw: str) -> Path:
    return Path(raw)


# --- many nodes (brisvox.server.directory; docs/SCALING.md) -----------------------------------

_NODE_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


def _redis_url(raw: str) -> Secret:
    if not re.fullmatch(r"(rediss?|unix)://\S+", raw):
        raise ValueError("expected redis://[user:password@]host[:port][/db], rediss://... or unix://path")
    return Secret(raw)  # it may carry a password


def _node_id(raw: str) -> str:
    if not _NODE_ID.fullmatch(raw):
        raise ValueError("expected 1 to 128 letters, digits, '.', '_' or '-'")
    return raw


# --- who may call (brisvox.server.auth; docs/OPERATIONS.md "Security") ----------------------

_STATIC_TOKEN = re.compile(r"[A-Za-z0-9._~+-]{16,512}")
_ORIGIN = re.compile(r"https?://[^/?#\s]+")


def _auth_mode(raw: str) -> AuthMode:
    try:
        return AuthMode(raw.strip().lower())
    except ValueError:
        raise ValueError(f"expected one of {', '.join(m.value for m in AuthMode)}") from None


def _telnyx_codec(raw: str) -> str:
    value = raw.strip().upper()
    if value not in ("PCMU", "PCMA"):
        raise ValueError("expected PCMU or PCMA (the call's stream_bidirectional_codec)")
    return value


def _items(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _static_tokens(raw: str) -> tuple[Secret, ...]:
    items = _items(raw)
    for i, item in enumerate(items, 1):
        if not _STATIC_TOKEN.fullmatch(item):
            raise ValueError(f"token {i} of {len(items)}: expected 16 to 512 characters from A-Z a-z 0-9 . _ ~ + - "
                             "(python -c 'import secrets; print(secrets.token_urlsafe(32))' makes one)")
    return tuple(Secret(item) for item in items)


def _signing_key(raw: str) -> Secret:
    if len(raw) < MIN_KEY_CHARS:
        raise ValueError(f"expected at least {MIN_KEY_CHARS} characters (`brisvox token --new-secret` makes one)")
    return Secret(raw)


def _allowed_hosts(raw: str) -> frozenset[str]:
    names = set()
    for item in _items(raw):
        try:
            names.add(ANY if item == ANY else _host(host_name(item)))
        except ValueError:
            raise ValueError(f"{item!r}: expected a host name, an IP address or '*'") from None
    return frozenset(names)


def _allowed_origins(raw: str) -> frozenset[str]:
    origins = set()
    for item in _items(raw):
        if item != ANY and not _ORIGIN.fullmatch(item):
            raise ValueError(f"{item!r}: expected scheme://host[:port] (http or https, no path) or '*'")
        origins.add(item.lower())
    return frozenset(origins)


def _auth_problems(values: Mapping[str, Any]) -> list[str]:
    """The auth variables that contradict each other (a credential the mode would ignore is one:
    the operator meant another mode)."""
    mode, tokens, key = values.get("auth"), values.get("auth_tokens"), values.get("auth_secret")
    problems = []
    if mode is AuthMode.BEARER and not tokens:
        problems.append("BRISVOX_AUTH=bearer needs BRISVOX_AUTH_TOKENS (one or more tokens, comma-separated)")
    if mode is AuthMode.SIGNED and key is None:
        problems.append("BRISVOX_AUTH=signed needs BRISVOX_AUTH_SECRET (the key that signs call tokens)")
    if mode is AuthMode.NONE and (tokens or key is not None):
        problems.append("BRISVOX_AUTH_TOKENS or BRISVOX_AUTH_SECRET is set but BRISVOX_AUTH is none: "
                        "set BRISVOX_AUTH to bearer or signed")
    if values.get("twilio_auth_token") is not None and values.get("twilio_public_url") is None:
        problems.append("BRISVOX_TWILIO_AUTH_TOKEN is set but BRISVOX_TWILIO_PUBLIC_URL is not: the signature is "
                        "over the public wss:// URL Twilio connects to")
    if values.get("twilio_webhook_url") is not None and values.get("twilio_auth_token") is None:
        problems.append("BRISVOX_TWILIO_WEBHOOK_URL is set but BRISVOX_TWILIO_AUTH_TOKEN is not: the webhook "
                        "answers only requests Twilio signed")
    if values.get("telnyx_webhook_url") is not None and (values.get("telnyx_public_key") is None
                                                          or values.get("telnyx_public_url") is None):
        problems.append("BRISVOX_TELNYX_WEBHOOK_URL needs BRISVOX_TELNYX_PUBLIC_KEY (to verify Telnyx's "
                        "signature) and BRISVOX_TELNYX_PUBLIC_URL (the wss:// stream URL it answers with)")
    if values.get("twilio_path") == values.get("ws_path", "/ws"):
        problems.append("BRISVOX_TWILIO_PATH must differ from BRISVOX_WS_PATH")
    if values.get("telnyx_path", "/telnyx") in (values.get("ws_path", "/ws"), values.get("twilio_path", "/twilio")):
        problems.append("BRISVOX_TELNYX_PATH must differ from BRISVOX_WS_PATH and BRISVOX_TWILIO_PATH")
    if bool(values.get("webrtc_turn_urls")) != (values.get("webrtc_turn_secret") is not None):
        problems.append("BRISVOX_WEBRTC_TURN_URLS and BRISVOX_WEBRTC_TURN_SECRET go together (coturn's "
                        "use-auth-secret)")
    if values.get("webrtc_path", "/whip") in (values.get("ws_path", "/ws"), values.get("twilio_path", "/twilio"),
                                              values.get("telnyx_path", "/telnyx")):
        problems.append("BRISVOX_WEBRTC_PATH must differ from the other call paths")
    if mode is AuthMode.BEARER and key is not None:
        problems.append("BRISVOX_AUTH_SECRET is set but BRISVOX_AUTH is bearer: set BRISVOX_AUTH=signed to use it")
    return problems


@dataclass(frozen=True, slots=True)
class Variable:
    """One environment variable: its name, the Settings field, the default and the parser
    (``secret``: a bad value is reported without the value)."""

    name: str
    field: str
    default: Any
    parse: Callable[[str], Any]
    help: str
    secret: bool = False


VARIABLES: tuple[Variable, ...] = (
    Variable("BRISVOX_HOST", "host", "127.0.0.1", _host, "address of the HTTP/WebSocket listener"),
    Variable("BRISVOX_PORT", "port", 8765, _int_in(0, 65535), "port of the listener (0: any free port)"),
    Variable("BRISVOX_MAX_CALLS", "max_calls", None, _int_in(1, 100_000),
             "calls served at once (unset: what the cores and the embedded models carry)"),
    Variable("BRISVOX_DRAIN_TIMEOUT", "drain_timeout", 30.0, _duration,
             "how long a stop signal waits for calls to end by themselves"),
    Variable("BRISVOX_CANCEL_TIMEOUT", "cancel_timeout", 5.0, _duration,
             "how long cancelled calls get to say goodbye"),
    Variable("BRISVOX_ABORT_TIMEOUT", "abort_timeout", 2.0, _duration,
             "how long aborted call tasks get to finish"),
    Variable("BRISVOX_WS_PATH", "ws_path", "/ws", _path, "path of the WebSocket call endpoint"),
    Variable("BRISVOX_AGENT_FILE", "agent_file", None, _file,
             "agent file served when `brisvox serve` gets none"),
    Variable("BRISVOX_LOG_LEVEL", "log_level", "info", _level, "debug, info, warning or error"),
    Variable("BRISVOX_TRACING", "tracing", False, _switch,
             "on: OpenTelemetry traces of every call over OTLP/HTTP (the OTEL_EXPORTER_OTLP_* variables; "
             "needs the otel extra)"),
    # many nodes (brisvox.server.directory; docs/SCALING.md)
    Variable("BRISVOX_REDIS_URL", "redis_url", None, _redis_url,
             "Redis for what crosses nodes: the call registry and the global call cap (a single node needs none)",
             secret=True),
    Variable("BRISVOX_NODE_ID", "node_id", None, _node_id,
             "this node's id in the call registry (default: the host name)"),
    Variable("BRISVOX_GLOBAL_MAX_CALLS", "global_max_calls", None, _int_in(1, 10_000_000),
             "calls across every node sharing BRISVOX_REDIS_URL (needs it)"),
    Variable("BRISVOX_VAD_BATCH", "vad_batch", True, _switch,
             "on: Silero scores the windows of every call together, one model run per round "
             "(off: one inference job per call and frame)"),
    Variable("BRISVOX_VAD_PERIOD", "vad_period", 0.01, _duration,
             "with BRISVOX_VAD_BATCH on: the batched Silero jobs start at most this often (0: whenever the "
             "last one ends); the windows that arrive in between wait for the next start, scored in one run"),
    Variable("BRISVOX_LOOP", "loop", "asyncio", _loop,
             "the event loop of `brisvox serve`: asyncio, or uvloop (the `fast` extra; docs/PERFORMANCE.md)"),
    # who may call (brisvox.server.auth; docs/OPERATIONS.md "Security")
    Variable("BRISVOX_AUTH", "auth", AuthMode.NONE, _auth_mode,
             "who may call: none (loopback only, unless --insecure), bearer (static tokens) or signed (call tokens)"),
    Variable("BRISVOX_AUTH_TOKENS", "auth_tokens", (), _static_tokens,
             "static bearer tokens, comma-separated (mode bearer; also accepted in mode signed)", secret=True),
    Variable("BRISVOX_AUTH_SECRET", "auth_secret", None, _signing_key,
             "the key that signs call tokens (mode signed; at least 32 characters)", secret=True),
    Variable("BRISVOX_ALLOWED_HOSTS", "allowed_hosts", frozenset(), _allowed_hosts,
             "Host names the server answers, comma-separated, or '*' (default: loopback names and BRISVOX_HOST)"),
    # Twilio Media Streams (brisvox.server.twilio_endpoint; docs/TELEPHONY.md)
    Variable("BRISVOX_TWILIO_PATH", "twilio_path", "/twilio", _path, "path of the Twilio Media Streams endpoint"),
    Variable("BRISVOX_TWILIO_PUBLIC_URL", "twilio_public_url", None, _wss_url,
             "the wss:// URL Twilio connects to, exactly as in the TwiML <Stream url>; signatures are over it"),
    Variable("BRISVOX_TWILIO_AUTH_TOKEN", "twilio_auth_token", None, Secret,
             "the Twilio account's auth token: turns on the X-Twilio-Signature check", secret=True),
    # Telnyx media streaming (brisvox.server.telnyx_endpoint; docs/TELEPHONY.md)
    Variable("BRISVOX_TELNYX_PATH", "telnyx_path", "/telnyx", _path, "path of the Telnyx media streaming endpoint"),
    Variable("BRISVOX_TELNYX_AUTH_TOKEN", "telnyx_auth_token", None, Secret,
             "the call's stream_auth_token: turns on the x-telnyx-streaming-auth-token check", secret=True),
    Variable("BRISVOX_TELNYX_CODEC", "telnyx_codec", "PCMU", _telnyx_codec,
             "the bot's audio law, PCMU or PCMA: equal to the call's stream_bidirectional_codec"),
    Variable("BRISVOX_TELNYX_PUBLIC_URL", "telnyx_public_url", None, _wss_url,
             "the wss:// URL of the Telnyx stream, as the incoming-call webhook answers it"),
    # incoming-call webhooks (brisvox.server.webhooks; docs/TELEPHONY.md)
    Variable("BRISVOX_TWILIO_WEBHOOK_URL", "twilio_webhook_url", None, _https_url,
             "the public URL of the Twilio voice webhook (its path is served); Twilio signs requests over it"),
    Variable("BRISVOX_TELNYX_WEBHOOK_URL", "telnyx_webhook_url", None, _https_url,
             "the public URL of the Telnyx TeXML voice webhook (its path is served)"),
    Variable("BRISVOX_TELNYX_PUBLIC_KEY", "telnyx_public_key", None, _ed25519_key,
             "the Telnyx account's Ed25519 public key (base64): turns on the webhook signature check"),
    # browsers over WebRTC (brisvox.server.webrtc_endpoint; docs/WEBRTC.md)
    Variable("BRISVOX_WEBRTC", "webrtc", True, _switch,
             "on: browsers call over WebRTC (WHIP) at BRISVOX_WEBRTC_PATH (needs the webrtc extra; without it, a warning)"),
    Variable("BRISVOX_WEBRTC_PATH", "webrtc_path", "/whip", _path, "path of the WHIP signaling endpoint"),
    Variable("BRISVOX_WEBRTC_HOSTS", "webrtc_hosts", None, _ip_list,
             "the addresses offered to browsers as ICE host candidates, comma-separated (default: BRISVOX_HOST, "
             "or 127.0.0.1 when it is a wildcard); no other address is ever offered"),
    Variable("BRISVOX_WEBRTC_TURN_URLS", "webrtc_turn_urls", (), _turn_urls,
             "coturn URLs given to browsers with short-lived credentials, comma-separated"),
    Variable("BRISVOX_WEBRTC_TURN_SECRET", "webrtc_turn_secret", None, Secret,
             "coturn's static-auth-secret (use-auth-secret): signs the browsers' TURN credentials", secret=True),
    Variable("BRISVOX_ALLOWED_ORIGINS", "allowed_origins", frozenset(), _allowed_origins,
             "web origins whose pages may start calls, comma-separated, or '*' (default: the server's own)"),
    # --- limits at the edge and per call (docs/OPERATIONS.md "Limits") ---
    Variable("BRISVOX_HANDSHAKE_TIMEOUT", "handshake_timeout", 5.0, _positive_duration,
             "each HTTP request head (and the WebSocket upgrade) must arrive within it"),
    Variable("BRISVOX_MAX_UNSTARTED", "max_unstarted", 128, _int_in(1, 100_000),
             "connections between their accept and their first request or call message"),
    Variable("BRISVOX_START_TIMEOUT", "start_timeout", 5.0, _positive_duration,
             "a call's start message must arrive within it after the upgrade"),
    Variable("BRISVOX_PING_INTERVAL", "ping_interval", 5.0, _positive_duration, "the server pings each call"),
    Variable("BRISVOX_PING_TIMEOUT", "ping_timeout", 15.0, _positive_duration,
             "a call with nothing from its client (no frame, no pong) for this long ends"),
    Variable("BRISVOX_IDLE_TIMEOUT", "idle_timeout", 60.0, _positive_duration,
             "a call with no caller audio for this long ends"),
    Variable("BRISVOX_MAX_CALL_DURATION", "max_call_duration", 3600.0, _positive_duration,
             "a call ends after this long"),
    Variable("BRISVOX_AUDIO_RATE", "audio_rate", 1.25, _audio_rate,
             "caller audio admitted per second of time (1.25: a quarter over real time), or off"),
    Variable("BRISVOX_AUDIO_FLOOD", "audio_flood", 5.0, _positive_duration,
             "seconds of dropped caller audio (decaying) that end a call"),
    Variable("BRISVOX_MAX_PONG_BACKLOG", "max_pong_backlog", 65536, _int_in(0, 1 << 30),
             "bytes of unsent data past which pongs to a client's pings are dropped"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The server process's settings (see :data:`VARIABLES` for each one's variable and default)."""

    host: str = "127.0.0.1"
    port: int = 8765
    max_calls: int | None = None  # None: brisvox.server.capacity.default_max_calls
    drain_timeout: float = 30.0
    cancel_timeout: float = 5.0
    abort_timeout: float = 2.0
    ws_path: str = "/ws"
    agent_file: Path | None = None
    log_level: str = "info"
    tracing: bool = False  # brisvox.server.tracing
    # many nodes (brisvox.server.directory)
    redis_url: Secret | None = None
    node_id: str | None = None
    global_max_calls: int | None = None
    vad_batch: bool = True  # brisvox.inference.vad_batch
    vad_period: float = 0.01  # SileroBatcher's period
    loop: str = "asyncio"  # or "uvloop" (brisvox.server.cli._run_loop)
    # who may call (brisvox.server.auth)
    auth: AuthMode = AuthMode.NONE
    auth_tokens: tuple[Secret, ...] = ()
    auth_secret: Secret | None = None
    allowed_hosts: frozenset[str] = frozenset()
    allowed_origins: frozenset[str] = frozenset()
    # Twilio Media Streams
    twilio_path: str = "/twilio"
    twilio_public_url: str | None = None
    twilio_auth_token: Secret | None = None
    # Telnyx media streaming
    telnyx_path: str = "/telnyx"
    telnyx_auth_token: Secret | None = None
    telnyx_codec: str = "PCMU"
    telnyx_public_url: str | None = None
    # incoming-call webhooks
    twilio_webhook_url: str | None = None
    telnyx_webhook_url: str | None = None
    telnyx_public_key: bytes | None = None
    # browsers over WebRTC
    webrtc: bool = True
    webrtc_path: str = "/whip"
    webrtc_hosts: tuple[str, ...] | None = None  # None: the listener's address (127.0.0.1 for a wildcard)
    webrtc_turn_urls: tuple[str, ...] = ()
    webrtc_turn_secret: Secret | None = None
    # limits (see VARIABLES)
    handshake_timeout: float = 5.0
    max_unstarted: int = 128
    start_timeout: float = 5.0
    ping_interval: float = 5.0
    ping_timeout: float = 15.0
    idle_timeout: float = 60.0
    max_call_duration: float = 3600.0
    audio_rate: float | None = 1.25
    audio_flood: float = 5.0
    max_pong_backlog: int = 65536

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        problems: list[str] = []
        for var in VARIABLES:
            raw = env.get(var.name, "")
            if raw == "":
                values[var.field] = var.default
                continue
            try:
                values[var.field] = var.parse(raw)
            except ValueError as exc:
                problems.append(f"{var.name}={'(hidden)' if var.secret else repr(raw)}: {exc}")
        problems.extend(_auth_problems(values))
        if values.get("global_max_calls") is not None and values.get("redis_url") is None:
            problems.append("BRISVOX_GLOBAL_MAX_CALLS needs BRISVOX_REDIS_URL: the nodes count their calls there")
        if not problems and values["ping_timeout"] <= values["ping_interval"]:
            problems.append(f"BRISVOX_PING_TIMEOUT={values['ping_timeout']:g}: must be longer than "
                            f"BRISVOX_PING_INTERVAL ({values['ping_interval']:g})")
        if problems:
            raise SettingsError(problems)
        return cls(**values)

    def transport_config(self) -> ServerConfig:
        """The WebSocket transport's limits these settings give (the rest are its defaults; admission,
        ``max_calls``, is the session manager's)."""
        return ServerConfig(
            host=self.host, port=self.port, path=self.ws_path,
            handshake_timeout=self.handshake_timeout, start_timeout=self.start_timeout,
            ping_interval=self.ping_interval, ping_timeout=self.ping_timeout, idle_timeout=self.idle_timeout,
            max_call_duration=self.max_call_duration, audio_rate=self.audio_rate, audio_flood=self.audio_flood,
        )

    def edge_config(self) -> EdgeConfig:
        """The limits of the server's edge (:mod:`brisvox.server.edge`)."""
        return EdgeConfig(handshake_timeout=self.handshake_timeout, max_unstarted=self.max_unstarted,
                          max_pong_backlog=self.max_pong_backlog)

    @property
    def host_names(self) -> frozenset[str]:
        """The Host names the server answers: ``allowed_hosts``, or by default the loopback names
        and the listener's own address (unless it is a wildcard such as 0.0.0.0)."""
        if self.allowed_hosts:
            return self.allowed_hosts
        return LOOPBACK_NAMES if is_wildcard(self.host) else LOOPBACK_NAMES | {host_name(self.host)}

    @property
    def shutdown_policy(self) -> ShutdownPolicy:
        return ShutdownPolicy(
            drain_timeout=self.drain_timeout, cancel_timeout=self.cancel_timeout, abort_timeout=self.abort_timeout
        )
