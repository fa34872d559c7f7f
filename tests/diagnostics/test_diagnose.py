"""keras_pickle._diagnosis.diagnose: the error a failed load raises, chosen from the caught error's fields."""

from __future__ import annotations

import io

import pytest

from keras_pickle._diagnosis import mismatch
from keras_pickle._diagnosis.diagnose import Reading, diagnose, foreign, unexpected
from keras_pickle.errors import (
    CORRUPT,
    REFUSED_GLOBAL,
    ChecksumMismatchError,
    KerasUnpicklingError,
    NotAPayloadError,
    UnsafePayloadError,
)

CHECKSUM = "xxh3_64+header:0123456789abcdef"
PAYLOAD_HEAD = b'\x80\x05ckeras_pickle._format\nrestore\n}"format": "keras_pickle", "checksum": "' + CHECKSUM.encode()


def reading(head: bytes, file: io.BytesIO | None = None) -> Reading:
    file = file if file is not None else io.BytesIO(head)
    return Reading(head=head, describe=lambda: "the data", file=file, start=0, whole=lambda: None)


def test_a_verdict_is_told_by_its_lead_not_by_its_text():
    given = KerasUnpicklingError("its header lacks checksum.", lead=CORRUPT)
    diagnosed = diagnose(given, reading(PAYLOAD_HEAD), None, 0)
    assert isinstance(diagnosed, ChecksumMismatchError) and diagnosed.original_error is given
    assert str(diagnosed).startswith(f"{mismatch.PREFIX}: its header lacks checksum; its content does not match")
    # The same words without the lead are no verdict of the format: the error stands as raised.
    unled = KerasUnpicklingError("its header lacks checksum.")
    assert diagnose(unled, reading(PAYLOAD_HEAD), None, 0) is unled


def test_a_refused_global_is_damage_only_where_the_stream_named_it():
    cut_short = "keras_pickle._format.resto"
    named = UnsafePayloadError(f"{REFUSED_GLOBAL}{cut_short}: not allowed.", what=cut_short)
    assert named.lead == REFUSED_GLOBAL
    diagnosed = diagnose(named, reading(PAYLOAD_HEAD), None, 0)
    assert isinstance(diagnosed, UnsafePayloadError) and diagnosed.what == cut_short
    assert str(diagnosed).startswith(mismatch.PREFIX)
    # A refusal that names the same string in a config (no lead): safe mode's refusal, as it was.
    in_a_config = UnsafePayloadError(f"Safe mode refused the layer {cut_short}.", what=cut_short)
    assert diagnose(in_a_config, reading(PAYLOAD_HEAD), None, 0) is in_a_config


def test_keras_s_own_pickle_refused_by_safe_mode_says_what_was_refused_and_how_to_convert():
    refused = UnsafePayloadError(f"{REFUSED_GLOBAL}x.Model._unpickle_model: not allowed. Do not load it.", what="x")
    diagnosed = diagnose(refused, reading(b"\x80\x05cx\nModel._unpickle_model\n"), None, 0)
    assert isinstance(diagnosed, UnsafePayloadError) and diagnosed.what == "x"
    first = str(diagnosed).splitlines()[0]
    assert "Keras's own pickle format" in first and f"({refused.refused})" in first and "Do not" not in first


def test_other_failures_are_named_as_the_data_shows_them():
    error = diagnose(ValueError("bad opcode"), reading(b"\x80\x05junk"), None, 0)
    assert isinstance(error, NotAPayloadError) and error.lead is not None
    assert error.detail == "the data could not be unpickled (ValueError: bad opcode)"
    ended = io.BytesIO(b"\x80\x05")
    ended.read()
    error = diagnose(EOFError(), reading(b"\x80\x05", ended), None, 0)
    assert str(error).startswith("Not a keras_pickle payload: the data is truncated")
    # In a payload's stream, the same failure is damage.
    assert isinstance(diagnose(ValueError("bad opcode"), reading(PAYLOAD_HEAD), None, 0), ChecksumMismatchError)


@pytest.mark.parametrize("head, found", [(b"PK\x03\x04rest", "a zip archive"), (b"\x80\x05junk", None)])
def test_a_format_that_is_never_a_pickle_is_refused_before_reading(head, found):
    error = foreign(reading(head))
    assert (error is None) if found is None else (found in str(error))


def test_a_stream_of_no_payload_is_not_one():
    error = unexpected([1], reading(b"\x80\x05junk"), None, 0)
    assert isinstance(error, NotAPayloadError) and error.found == "a pickled builtins.list"
    assert unexpected([1], reading(b"\x80\x05junk"), None, 1) is None  # an unpickler that shows nothing unused


def test_detail_follows_a_message_rewritten_after_it_was_raised():
    error = KerasUnpicklingError(f"{CORRUPT}its body has no config.")
    assert (error.lead, error.detail) == (CORRUPT, "its body has no config")
    error.args = (f"{error.args[0]} (Payload written elsewhere.)",)
    assert error.detail == "its body has no config. (Payload written elsewhere.)"
