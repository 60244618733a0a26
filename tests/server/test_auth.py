"""Call tokens, static bearer tokens, and the Host and Origin checks (the pure part of the access checks)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import brisvox.server.auth as auth
from brisvox.core.errors import InvalidInput
from brisvox.core.secret import Secret
from brisvox.server.auth import (
    LEEWAY,
    Authenticator,
    AuthMode,
    AuthRefusal,
    CallClaims,
    RefusalReason,
    check_host,
    check_origin,
    credential_from,
    host_name,
    is_loopback,
    issue_call_token,
    token_from_query,
    verify_call_token,
    without_query_token,
)

KEY = "k" * 40
NOW = 1_800_000_000.0


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed(header: Any, payload: Any, key: str = KEY, *, raw_payload: bytes | None = None) -> str:
    """A token with any header and payload, correctly signed with ``key``."""
    body = raw_payload if raw_payload is not None else json.dumps(payload).encode()
    signing_input = b64(json.dumps(header).encode()) + "." + b64(body)
    return signing_input + "." + b64(hmac.new(key.encode(), signing_input.encode(), hashlib.sha256).digest())


def reason(verdict: CallClaims | AuthRefusal | None) -> RefusalReason | None:
    return verdict.reason if isinstance(verdict, AuthRefusal) else None


def test_the_public_api_of_auth_is_exactly_this() -> None:
    assert sorted(auth.__all__) == [
        "ANY", "AuthMode", "AuthRefusal", "Authenticator", "CallClaims", "DEFAULT_TTL", "LEEWAY", "LOOPBACK_NAMES",
        "MAX_TOKEN_CHARS", "MAX_TTL", "MIN_KEY_CHARS", "PROTOCOL", "RefusalReason", "TOKEN_SUBPROTOCOL_PREFIX",
        "check_host", "check_origin", "credential_from", "host_name", "is_loopback", "is_wildcard",
        "issue_call_token", "token_from_query", "verify_call_token", "without_query_token",
    ]


def test_an_issued_token_verifies_with_its_claims_until_it_expires() -> None:
    token = issue_call_token(Secret(KEY), now=NOW, ttl=300, agent="lokanta", subject="user-7")
    claims = verify_call_token(token, KEY, now=NOW + 299, agent="lokanta")
    assert claims == CallClaims(expires=NOW + 300, issued=NOW, agent="lokanta", subject="user-7")
    # A standard JWT: three base64url parts, header HS256.
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header == {"alg": "HS256", "typ": "JWT"}


def test_an_expired_token_is_refused_past_the_leeway() -> None:
    token = issue_call_token(KEY, now=NOW, ttl=60)
    assert isinstance(verify_call_token(token, KEY, now=NOW + 60 + LEEWAY - 1), CallClaims)
    refusal = verify_call_token(token, KEY, now=NOW + 60 + LEEWAY + 50)
    assert isinstance(refusal, AuthRefusal) and refusal.reason is RefusalReason.EXPIRED_TOKEN
    assert refusal.status == 401 and "expired 60 s ago" in refusal.detail


def test_a_tampered_token_is_refused() -> None:
    token = issue_call_token(KEY, now=NOW, ttl=60, agent="a")
    head, payload, sig = token.split(".")
    longer = b64(json.dumps({"iat": int(NOW), "exp": int(NOW) + 10**6, "agent": "a"}).encode())
    assert reason(verify_call_token(f"{head}.{longer}.{sig}", KEY, now=NOW)) is RefusalReason.INVALID_TOKEN
    flipped = sig[:-2] + ("A" if sig[-2] != "A" else "B") + sig[-1]
    assert reason(verify_call_token(f"{head}.{payload}.{flipped}", KEY, now=NOW)) is RefusalReason.INVALID_TOKEN
    assert reason(verify_call_token(token, "x" * 40, now=NOW)) is RefusalReason.INVALID_TOKEN  # another key


def test_an_unsigned_alg_none_token_is_refused() -> None:
    head = b64(json.dumps({"alg": "none"}).encode())
    body = b64(json.dumps({"exp": NOW + 100}).encode())
    assert reason(verify_call_token(f"{head}.{body}.", KEY, now=NOW)) is RefusalReason.MALFORMED_TOKEN
    assert reason(verify_call_token(f"{head}.{body}.AAAA", KEY, now=NOW)) is RefusalReason.INVALID_TOKEN


def test_a_token_for_another_agent_is_refused_with_403_and_an_unbound_token_fits_any_agent() -> None:
    bound = issue_call_token(KEY, now=NOW, agent="other")
    refusal = verify_call_token(bound, KEY, now=NOW, agent="lokanta")
    assert isinstance(refusal, AuthRefusal) and refusal.reason is RefusalReason.WRONG_AGENT
    assert refusal.status == 403
    assert isinstance(verify_call_token(issue_call_token(KEY, now=NOW), KEY, now=NOW, agent="lokanta"), CallClaims)


def test_a_token_not_valid_yet_is_refused() -> None:
    token = signed({"alg": "HS256"}, {"exp": NOW + 600, "nbf": NOW + 300})
    assert reason(verify_call_token(token, KEY, now=NOW)) is RefusalReason.TOKEN_NOT_YET_VALID
    assert isinstance(verify_call_token(token, KEY, now=NOW + 300), CallClaims)


@pytest.mark.parametrize("payload", [
    {}, {"exp": "soon"}, {"exp": True}, {"exp": 1e400}, {"exp": 10**400}, {"exp": NOW + 60, "agent": 7},
    {"exp": NOW + 60, "nbf": [1]}, [1, 2],
])
def test_signed_claims_of_the_wrong_shape_are_malformed(payload: Any) -> None:
    assert reason(verify_call_token(signed({"alg": "HS256"}, payload), KEY, now=NOW)) is RefusalReason.MALFORMED_TOKEN


def test_a_deeply_nested_signed_payload_is_a_refusal_not_a_recursion_error() -> None:
    token = signed({"alg": "HS256"}, None, raw_payload=b"[" * 2500)
    assert len(token) <= auth.MAX_TOKEN_CHARS
    assert reason(verify_call_token(token, KEY, now=NOW)) is RefusalReason.MALFORMED_TOKEN


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"ttl": 0}, "ttl 0"), ({"ttl": float("inf")}, "ttl inf"), ({"ttl": 10**6}, "ttl"), ({"agent": ""}, "agent"),
])
def test_issuing_with_a_bad_argument_names_it(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidInput, match=words):
        issue_call_token(KEY, now=NOW, **kwargs)


def test_a_short_signing_key_is_refused() -> None:
    with pytest.raises(InvalidInput, match="at least 32"):
        issue_call_token("short", now=NOW)
    with pytest.raises(InvalidInput, match="at least 32"):
        Authenticator(AuthMode.SIGNED, key=Secret("short"))


# --- the fuzz: the verifier is a wire parser --------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_CLAIMS = st.fixed_dictionaries({}, optional={
    "exp": _JSON | st.floats(NOW - 100, NOW + 100), "nbf": _JSON, "iat": _JSON, "agent": _JSON, "sub": _JSON,
})
_TOKEN_CHARS = st.text(alphabet="ABCDEFabcdef0123456789-_.=+/ \x00é", max_size=120)


_LONG = st.builds(lambda piece, n: piece * n, st.text(min_size=1, max_size=3), st.integers(1000, 5000))


@settings(max_examples=400, deadline=None)
@given(token=st.one_of(st.text(max_size=300), _TOKEN_CHARS, _LONG))
def test_fuzz_any_string_is_a_typed_refusal_never_an_exception(token: str) -> None:
    verdict = verify_call_token(token, KEY, now=NOW, agent="a")
    assert isinstance(verdict, AuthRefusal)
    # the detail never echoes the token (a token under 8 characters can occur in the fixed text by chance)
    assert token not in verdict.detail or len(token) < 8
    assert Authenticator(AuthMode.SIGNED, key=Secret(KEY), tokens=[Secret("s" * 20)]).check(token, NOW) is not None


@settings(max_examples=300, deadline=None)
@given(header=_JSON | st.fixed_dictionaries({"alg": _JSON}), claims=_CLAIMS | _JSON, cut=st.integers(0, 200))
def test_fuzz_signed_tokens_of_any_shape_and_their_cuts_never_raise(header: Any, claims: Any, cut: int) -> None:
    token = signed(header, claims)
    for candidate in (token, token[:cut], token[cut:]):
        verdict = verify_call_token(candidate, KEY, now=NOW, agent="a")
        assert isinstance(verdict, CallClaims | AuthRefusal)


@settings(max_examples=200, deadline=None)
@given(authorization=st.none() | st.text(max_size=40), offered=st.lists(st.text(max_size=30), max_size=4),
       host=st.none() | st.text(max_size=40), origin=st.none() | st.text(max_size=40))
def test_fuzz_the_header_readers_never_raise(authorization: str | None, offered: list[str], host: str | None,
                                             origin: str | None) -> None:
    assert isinstance(credential_from(authorization, offered), str | AuthRefusal | None)
    assert isinstance(check_host(host, frozenset({"localhost"})), AuthRefusal | None)
    assert isinstance(check_origin(origin, host, frozenset({"https://a.example"})), AuthRefusal | None)


# --- static tokens and the mode ---------------------------------------------------------------


def test_a_static_bearer_token_is_accepted_and_any_other_refused() -> None:
    a = Authenticator(AuthMode.BEARER, tokens=[Secret("first-token-0123456"), Secret("second-token-012345")])
    assert a.check("second-token-012345", NOW) is None
    assert reason(a.check("second-token-01234", NOW)) is RefusalReason.INVALID_TOKEN
    assert reason(a.check(None, NOW)) is RefusalReason.MISSING_TOKEN
    assert reason(a.check(issue_call_token(KEY, now=NOW), NOW)) is RefusalReason.INVALID_TOKEN  # no key: no JWTs


def test_signed_mode_takes_call_tokens_and_the_static_tokens() -> None:
    a = Authenticator(AuthMode.SIGNED, key=Secret(KEY), tokens=[Secret("scraper-token-01234")], agent="lokanta")
    assert a.check(issue_call_token(KEY, now=NOW, agent="lokanta"), NOW) is None
    assert a.check("scraper-token-01234", NOW) is None
    assert reason(a.check(issue_call_token(KEY, now=NOW, agent="x"), NOW)) is RefusalReason.WRONG_AGENT


def test_mode_none_lets_everyone_in_and_the_modes_need_their_credentials() -> None:
    assert Authenticator(AuthMode.NONE).check(None, NOW) is None
    with pytest.raises(InvalidInput, match="bearer"):
        Authenticator(AuthMode.BEARER)
    with pytest.raises(InvalidInput, match="signing key"):
        Authenticator(AuthMode.SIGNED)


def test_the_credential_comes_from_the_bearer_header_first_then_the_subprotocol() -> None:
    assert credential_from("Bearer abc", ["brisvox.token.xyz"]) == "abc"
    assert credential_from("bearer  abc ", []) == "abc"
    assert credential_from(None, ["brisvox", "brisvox.token.xyz"]) == "xyz"
    assert credential_from(None, ["brisvox"]) is None
    for bad in ("Basic abc", "Bearer", "abc"):
        assert reason(credential_from(bad, [])) is RefusalReason.MALFORMED_TOKEN  # type: ignore[arg-type]


# --- Host and Origin -------------------------------------------------------------------------


def test_host_names_lose_their_port_and_brackets() -> None:
    assert [host_name(h) for h in ("LocalHost:8765", "[::1]:80", "::1", "example.com.", "10.0.0.5")] == [
        "localhost", "::1", "::1", "example.com", "10.0.0.5"]
    assert is_loopback("127.0.0.2") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("voice.example.com")


def test_a_foreign_host_is_refused_and_an_allowed_one_passes() -> None:
    allowed = frozenset({"localhost", "127.0.0.1"})
    assert check_host("127.0.0.1:8765", allowed) is None
    refusal = check_host("rebind.attacker.example:8765", allowed)
    assert isinstance(refusal, AuthRefusal) and refusal.reason is RefusalReason.HOST_NOT_ALLOWED
    assert refusal.status == 403 and "rebind.attacker.example" in refusal.detail
    assert reason(check_host(None, allowed)) is RefusalReason.HOST_NOT_ALLOWED
    assert check_host("anything", frozenset({"*"})) is None


def test_a_cross_origin_page_is_refused_and_the_servers_own_page_and_non_browsers_pass() -> None:
    allowed = frozenset({"https://app.example.com"})
    assert check_origin(None, "127.0.0.1:8765", allowed) is None  # not a browser
    assert check_origin("http://127.0.0.1:8765", "127.0.0.1:8765", allowed) is None  # same origin
    assert check_origin("https://APP.example.com", "voice.example.com", allowed) is None
    refusal = check_origin("https://evil.example", "127.0.0.1:8765", allowed)
    assert isinstance(refusal, AuthRefusal) and refusal.reason is RefusalReason.ORIGIN_NOT_ALLOWED
    assert reason(check_origin("null", "127.0.0.1:8765", allowed)) is RefusalReason.ORIGIN_NOT_ALLOWED
    assert reason(check_origin("http://127.0.0.1:9999", "127.0.0.1:8765", allowed)) is RefusalReason.ORIGIN_NOT_ALLOWED


def test_the_query_token_is_read_once_and_an_empty_repeated_or_undecodable_one_is_malformed() -> None:
    assert token_from_query(b"a=1&token=abc%2Bd") == "abc+d"
    assert token_from_query(b"") is None and token_from_query(b"a=1") is None
    for bad in (b"token=", b"token=a&token=b", b"token=\xff", b"token=" + b"x" * (auth.MAX_TOKEN_CHARS + 1),
                b"&".join([b"a=1"] * 100)):
        assert reason(token_from_query(bad)) is RefusalReason.MALFORMED_TOKEN, bad
    assert without_query_token(b"a=1&token=abc&b=%20") == b"a=1&b=+"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(alphabet="token=&%2Bab\xff", max_size=80).map(str.encode))
def test_fuzz_the_query_token_reader_never_raises(query: bytes) -> None:
    got = token_from_query(query)
    assert isinstance(got, str | AuthRefusal | None)
    assert not isinstance(token_from_query(without_query_token(query)), str)  # no token is left in it
