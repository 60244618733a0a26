"""The PlayoutBook: the record of what the caller heard, keyed by (epoch, round).

Writers, each from its own stage:

* the LLM runner records where each round's assistant message sits in the context
  (``record_round``);
* the TTS stage opens one utterance per round (``open_utterance``), records the exact
  text it sent (``push_sent``), the word timings the TTS reported (``push_words``) and
  marks the response done (``response_done``) once every utterance was flushed;
* TransportOut records the audio it handed to the transport (``audio_sent``, which also
  finds where each epoch's audible audio begins: a voice's leading near-silence is not
  what the caller waits for) and the positions the transport released to the caller
  (``released``, which says when an epoch's first audio, and its first audible audio,
  went out), and, on a carrier call, the audio a clear flushed from the carrier unplayed
  (``unplayed``: the lead its mark echoes proved), which the caller did not hear.

At the next turn the runner asks ``cuts(before_epoch)`` for every unsettled round of
an older epoch and applies each cut to the context, newest message first, so the context
holds what the caller heard and only that: an utterance's released audio, less its share
of the flushed lead (taken from the end of the epoch's audio, its last utterance first).  All state is plain Python touched from one
event loop; nothing here awaits.  Bounded: settled rounds are forgotten, at most
``max_rounds`` unsettled rounds are kept (the oldest is dropped and counted).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field

from brisvox.agent.played import PlayedText, Truncation
from brisvox.audio.pcm import first_audible, sample_count
from brisvox.core.frames import WordTiming

__all__ = ["Cut", "PlayoutBook", "PlayoutStats", "Released"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Utterance:
    epoch: int
    round: int
    played: PlayedText = field(default_factory=PlayedText)
    sent_samples: int = 0
    released_samples: int = 0
    sample_rate: int = 0
    msg_index: int | None = None
    audible: int | None = None  # the sample where its audible audio begins
    flushed: bool = False  # all of its audio was handed to the transport

    @property
    def position(self) -> float:
        return self.released_samples / self.sample_rate if self.sample_rate else 0.0

    @property
    def played_out(self) -> bool:
        return self.released_samples >= self.sent_samples


@dataclass(frozen=True, slots=True)
class Cut:
    """One round's assistant message and what of it was heard (``position``: the seconds of its
    audio the caller heard)."""

    epoch: int
    round: int
    msg_index: int
    position: float
    truncation: Truncation


@dataclass(frozen=True, slots=True)
class Released:
    """What a position report revealed: the epoch whose first audio it is (``started``), and
    the epoch whose first audible sample it covers (``audible``) with the seconds of audio
    released from that sample on (``audible_ago``)."""

    started: int | None = None
    audible: int | None = None
    audible_ago: float = 0.0


_NOTHING = Released()


@dataclass(slots=True)
class PlayoutStats:
    utterances: int = 0
    rounds_dropped: int = 0
    cuts: int = 0


class PlayoutBook:
    def __init__(self, max_rounds: int = 256) -> None:
        self._utterances: OrderedDict[int, _Utterance] = OrderedDict()
        self._by_round: dict[tuple[int, int], int] = {}
        self._done: set[int] = set()
        self._started: set[int] = set()
        self._audible: set[int] = set()  # epochs whose first audible audio was released
        self._ended: set[int] = set()
        self._unplayed: dict[int, float] = {}  # epoch -> seconds a clear flushed unplayed
        self._next_id = 1
        self._max_rounds = max_rounds
        self.stats = PlayoutStats()

    # --- the TTS stage -------------------------------------------------------------------

    def open_utterance(self, epoch: int, round_: int) -> int:
        key = (epoch, round_)
        if key in self._by_round:
            return self._by_round[key]
        utt_id = self._next_id
        self._next_id += 1
        self._utterances[utt_id] = _Utterance(epoch, round_)
        self._by_round[key] = utt_id
        self.stats.utterances += 1
        while len(self._utterances) > self._max_rounds:
            old_id, old = self._utterances.popitem(last=False)
            self._by_round.pop((old.epoch, old.round), None)
            self.stats.rounds_dropped += 1
            log.warning("playout book full: forgot utterance %d of epoch %d", old_id, old.epoch)
        return utt_id

    def push_sent(self, utterance: int, text: str) -> None:
        if (u := self._utterances.get(utterance)) is not None:
            u.played.push_sent(text)

    def push_words(self, utterance: int, words: tuple[WordTiming, ...]) -> None:
        if (u := self._utterances.get(utterance)) is not None:
            for w in words:
                u.played.push_word(w.word, w.start)

    def response_done(self, epoch: int) -> None:
        self._done.add(epoch)

    # --- the runner ----------------------------------------------------------------------

    def record_round(self, epoch: int, round_: int, msg_index: int) -> None:
        utt_id = self._by_round.get((epoch, round_))
        if utt_id is None:
            utt_id = self.open_utterance(epoch, round_)
        self._utterances[utt_id].msg_index = msg_index

    def forget_messages(self) -> None:
        """The context was replaced (a flow's reset): no recorded round has its message any more."""
        for u in self._utterances.values():
            u.msg_index = None

    # --- TransportOut --------------------------------------------------------------------

    def audio_sent(self, utterance: int, pcm: bytes, sample_rate: int) -> None:
        if (u := self._utterances.get(utterance)) is not None:
            if u.audible is None and u.epoch not in self._audible:
                first = first_audible(pcm)  # scanned only until the utterance's voice begins
                if first is not None:
                    u.audible = u.sent_samples + first
            u.sent_samples += sample_count(pcm)
            u.sample_rate = sample_rate

    def flushed(self, utterance: int) -> None:
        """All of the utterance's audio has been handed to the transport (``UtteranceFlushed``)."""
        if (u := self._utterances.get(utterance)) is not None:
            u.flushed = True

    def all_flushed(self, epoch: int) -> bool:
        """Every utterance of ``epoch`` opened so far has all its audio with the transport."""
        return all(u.flushed for u in self._utterances.values() if u.epoch == epoch)

    def released(self, utterance: int, samples: int, sample_rate: int) -> Released:
        """Record a position (``samples`` of the utterance released so far, in real time)."""
        u = self._utterances.get(utterance)
        if u is None:
            return _NOTHING
        u.released_samples = max(u.released_samples, samples)
        u.sample_rate = u.sample_rate or sample_rate
        started = audible = None
        ago = 0.0
        if u.epoch not in self._started and samples > 0:
            self._started.add(u.epoch)
            started = u.epoch
        if u.epoch not in self._audible and u.audible is not None and samples > u.audible:
            self._audible.add(u.epoch)
            audible = u.epoch
            ago = (samples - u.audible) / u.sample_rate if u.sample_rate else 0.0
        if started is None and audible is None:
            return _NOTHING
        return Released(started, audible, ago)

    def unplayed(self, epoch: int, seconds: float) -> None:
        """A clear flushed ``seconds`` of epoch ``epoch``'s released audio from the client
        before it played (the transport's ``PlaybackLead``)."""
        self._unplayed[epoch] = max(0.0, seconds)
        while len(self._unplayed) > self._max_rounds:
            del self._unplayed[next(iter(self._unplayed))]

    def _heard_at(self, epoch: int) -> dict[int, float]:
        """Seconds heard of each of the epoch's utterances: released, less the flushed lead
        taken from the end (utterances play in the order they were opened)."""
        left = self._unplayed.get(epoch, 0.0)
        out: dict[int, float] = {}
        for utt_id in reversed(self._utterances):
            u = self._utterances[utt_id]
            if u.epoch == epoch:
                take = min(left, u.position)
                left -= take
                out[utt_id] = u.position - take
        return out

    def _truncation(self, utt_id: int, u: _Utterance, heard: dict[int, float]) -> tuple[float, Truncation]:
        position = heard.get(utt_id, u.position)
        fully = u.epoch in self._done and u.played_out and u.sent_samples > 0 and position >= u.position
        return position, u.played.heard(position, fully_played=fully)

    def take_ended(self, epoch: int) -> bool:
        """True once (and only once) when the epoch's response is done and has played out."""
        if epoch in self._ended or epoch not in self._done:
            return False
        if all(u.played_out for u in self._utterances.values() if u.epoch == epoch):
            self._ended.add(epoch)
            return True
        return False

    # --- settling ------------------------------------------------------------------------

    def cuts(self, before_epoch: int) -> list[Cut]:
        """What was heard of every recorded round older than ``before_epoch``, newest message
        first (apply them in this order so removals do not move the later indices); the
        rounds are forgotten."""
        out: list[Cut] = []
        epochs = {u.epoch for u in self._utterances.values() if u.epoch < before_epoch}
        heard = {utt_id: pos for epoch in epochs for utt_id, pos in self._heard_at(epoch).items()}
        for epoch in [e for e in self._unplayed if e < before_epoch]:
            del self._unplayed[epoch]
        for utt_id in [i for i, u in self._utterances.items() if u.epoch < before_epoch]:
            u = self._utterances.pop(utt_id)
            self._by_round.pop((u.epoch, u.round), None)
            if u.msg_index is None:
                continue
            out.append(Cut(u.epoch, u.round, u.msg_index, *self._truncation(utt_id, u, heard)))
        self.stats.cuts += len(out)
        out.sort(key=lambda c: c.msg_index, reverse=True)
        return out

    def heard(self, utterance: int) -> tuple[float, Truncation] | None:
        """Seconds of the utterance the caller heard (released, less a flushed lead) and the text
        they cover (None: unknown utterance).  The S2S stage tells the model this at a cut
        (``S2sSession.truncate``)."""
        u = self._utterances.get(utterance)
        if u is None:
            return None
        return self._truncation(utterance, u, self._heard_at(u.epoch))

    def epoch_of(self, utterance: int) -> int | None:
        u = self._utterances.get(utterance)
        return None if u is None else u.epoch
