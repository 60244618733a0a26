"""The pure signaling helpers: the offer's checks (with a hypothesis fuzz), TURN credentials,
Link headers, the per-address limits."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brisvox.transport.webrtc.signaling import (
    AddressCalls,
    IceServer,
    OfferRate,
    SignalingRefusal,
    ice_json,
    link_headers,
    parse_offer,
    turn_credentials,
)

OFFER = "\r\n".join([
    "v=0", "o=- 1 1 IN IP4 0.0.0.0", "s=-", "t=0 0", "a=group:BUNDLE 0",
    "m=audio 9 UDP/TLS/RTP/SAVPF 111", "c=IN IP4 0.0.0.0", "a=mid:0", "a=sendrecv", "a=rtpmap:111 opus/48000/2",
    "a=candidate:1 1 udp 2122260223 127.0.0.1 50000 typ host",
    "a=candidate:2 1 udp 2122260223 0b4c-uuid.local 50001 typ host",
    "a=ice-ufrag:abcd", "a=ice-pwd:0123456789abcdef012345", "a=fingerprint:sha-256 AA:BB", "a=setup:actpass",
]) + "\r\n"


def test_a_good_offer_passes_without_its_mdns_candidates() -> None:
    got = parse_offer("application/sdp; charset=utf-8", OFFER.encode(), max_body=65536)
    assert isinstance(got, str)
    assert "127.0.0.1 50000" in got and ".local" not in got


@pytest.mark.parametrize(("content_type", "body", "status", "reason"), [
    ("text/plain", OFFER.encode(), 415, "unsupported_media_type"),
    (None, OFFER.encode(), 415, "unsupported_media_type"),
    ("application/sdp", OFFER.encode() * 20, 413, "offer_too_large"),
    ("application/sdp", b"\xff\xfe", 400, "bad_offer"),
    ("application/sdp", b"hello", 400, "bad_offer"),
    ("application/sdp", OFFER.replace("m=audio", "m=video").encode(), 400, "bad_offer"),
    ("application/sdp", (OFFER + "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n").encode(), 400, "bad_offer"),
    ("application/sdp", (OFFER + "m=video 9 UDP/TLS/RTP/SAVPF 96\r\n").encode(), 400, "bad_offer"),
    ("application/sdp", (OFFER + "a=x\r\n" * 500).encode(), 400, "bad_offer"),
    ("application/sdp", (OFFER + "a=" + "x" * 3500 + "\r\n").encode(), 400, "bad_offer"),
    ("application/sdp", (OFFER + "junk\r\n").encode(), 400, "bad_offer"),
])
def test_a_bad_offer_is_refused_with_its_status_and_reason(content_type: str | None, body: bytes, status: int,
                                                           reason: str) -> None:
    got = parse_offer(content_type, body, max_body=4096 if b"x" * 3500 not in body else 8192)
    assert isinstance(got, SignalingRefusal)
    assert (got.status, got.reason) == (status, reason)
    assert got.body().startswith(reason)


def test_one_data_channel_section_is_allowed_beside_the_audio() -> None:
    data = OFFER + "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:1\r\n"
    assert isinstance(parse_offer("application/sdp", data.encode(), max_body=65536), str)
    twice = data + "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n"
    assert isinstance(parse_offer("application/sdp", twice.encode(), max_body=65536), SignalingRefusal)


_lines = st.one_of(
    st.sampled_from(OFFER.split("\r\n")),
    st.sampled_from(["m=audio 9 X 1", "m=video 9 X 1", "m=application 9 X", "v=0", "a=candidate:1 1 udp 1 x.local 1"]),
    st.text(max_size=60),
)


@settings(max_examples=300, deadline=None)
@given(content_type=st.one_of(st.none(), st.just("application/sdp"), st.text(max_size=30)),
       body=st.one_of(st.binary(max_size=600), st.lists(_lines, max_size=40).map(lambda ls: "\r\n".join(ls).encode()),
                      st.builds(lambda tail: OFFER.encode() + tail, st.binary(max_size=200))))
def test_fuzzed_offers_are_answered_or_refused_never_raised(content_type: str | None, body: bytes) -> None:
    got = parse_offer(content_type, body, max_body=2048)
    if isinstance(got, SignalingRefusal):
        assert got.status in (400, 413, 415) and got.reason and got.detail
        return
    lines = got.split("\r\n")
    assert lines[0] == "v=0"
    assert sum(line.startswith("m=audio") for line in lines) == 1
    assert not any(line.startswith("a=candidate:") and ".local" in line.lower() for line in lines)


def test_turn_credentials_follow_coturns_rest_formula() -> None:
    username, password = turn_credentials("secret", "alice", now=1_000_000.7, ttl=600)
    assert username == "1000600:alice"
    assert password == base64.b64encode(hmac.new(b"secret", b"1000600:alice", hashlib.sha1).digest()).decode()


def test_ice_servers_as_link_headers_and_json() -> None:
    servers = [IceServer(("stun:127.0.0.1:3478",)), IceServer(("turn:a:1?transport=udp", "turn:a:1?transport=tcp"),
                                                                "1:u", "p/w+")]
    assert link_headers(servers) == [
        '<stun:127.0.0.1:3478>; rel="ice-server"',
        '<turn:a:1?transport=udp>; rel="ice-server"; username="1:u"; credential="p/w+"; credential-type="password"',
        '<turn:a:1?transport=tcp>; rel="ice-server"; username="1:u"; credential="p/w+"; credential-type="password"',
    ]
    assert ice_json(servers)["iceServers"][1] == {"urls": ["turn:a:1?transport=udp", "turn:a:1?transport=tcp"],
                                                  "username": "1:u", "credential": "p/w+"}
    with pytest.raises(ValueError, match="quote"):
        link_headers([IceServer(("turn:a",), 'x"y', "p")])


def test_offers_per_address_are_a_token_bucket_with_a_bounded_table() -> None:
    rate = OfferRate(per_second=1.0, burst=2.0, max_addresses=2)
    assert rate.admit("a", 0.0) is None and rate.admit("a", 0.0) is None
    assert rate.admit("a", 0.0) == pytest.approx(1.0)
    assert rate.admit("b", 0.0) is None, "another address has its own bucket"
    assert rate.admit("a", 1.0) is None, "a second later one token is back"
    rate.admit("c", 1.0)
    assert "b" not in rate._buckets, "the least recently seen address is forgotten"


def test_calls_per_address_are_capped_and_given_back() -> None:
    calls = AddressCalls(limit=2)
    assert calls.take("a") and calls.take("a") and not calls.take("a") and calls.take("b")
    calls.give_back("a")
    assert calls.take("a") and len(calls) == 3
