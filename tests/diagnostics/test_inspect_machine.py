"""The inspector's stack machine: each opcode read as the unpickler reads it, on inert values."""

from __future__ import annotations

import copyreg
import pickle
import pickletools

import pytest

import keras_pickle
from keras_pickle._inspect.machine import evaluate
from keras_pickle._inspect.opcode_handlers import DISPATCH
from keras_pickle._inspect.opening import opened


def evaluated(data: bytes):
    with opened(data) as pickle_input:
        return evaluate(pickle_input, hold_data=False)


def test_every_opcode_of_protocols_0_to_5_has_a_handler():
    assert set(DISPATCH) == {opcode.name for opcode in pickletools.opcodes}


# A code no one registers, of each width pickle writes an extension code in.
EXTENSION_CODES = {"EXT1": 0xF1, "EXT2": 0xF1F2, "EXT4": 0x7F1F2F3F}


@pytest.fixture(params=sorted(EXTENSION_CODES))
def dict_by_extension_code(request):
    """What ``pickle.dumps`` writes for ``{'a': 1, 'type': dict}`` while copyreg registers ``builtins.dict``
    under an extension code (of the width the param names) for the test's duration."""
    code = EXTENSION_CODES[request.param]
    copyreg.add_extension("builtins", "dict", code)
    try:
        data = pickle.dumps({"a": 1, "type": dict}, protocol=2)
        assert request.param in {opcode.name for opcode, _arg, _pos in pickletools.genops(data)}
        yield data
    finally:
        copyreg.remove_extension("builtins", "dict", code)


def test_a_global_named_by_an_extension_code_is_the_name_copyreg_registers(dict_by_extension_code):
    assert pickle.loads(dict_by_extension_code) == {"a": 1, "type": dict}
    assert evaluated(dict_by_extension_code).globals == [("builtins", "dict")]
    with pytest.raises(keras_pickle.NotAPayloadError, match="never calls keras_pickle._format.restore"):
        keras_pickle.inspect(dict_by_extension_code)


def test_an_extension_code_no_one_registers_is_named_by_its_number():
    data = pickle.PROTO + b"\x02" + pickle.EXT1 + bytes([EXTENSION_CODES["EXT1"]]) + pickle.EMPTY_DICT + pickle.STOP
    with pytest.raises(ValueError, match="unregistered extension code"):
        pickle.loads(data)
    assert evaluated(data).globals == [("<extension code>", str(EXTENSION_CODES["EXT1"]))]
