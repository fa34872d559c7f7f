"""keras_pickle._quiet: what is written to file descriptor 2 during an import is caught, and given back on failure."""

from __future__ import annotations

import os

import pytest

from keras_pickle import _quiet


def test_what_is_written_to_descriptor_2_inside_is_caught(capfd):
    with _quiet.quietly():
        os.write(2, b"I0000 oneDNN custom operations are on\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_what_was_caught_is_written_back_when_the_block_raises(capfd):
    with pytest.raises(ImportError), _quiet.quietly():
        os.write(2, b"why the import failed\n")
        raise ImportError("no module named x")
    assert capfd.readouterr().err == "why the import failed\n"


def test_disabled_it_catches_nothing(capfd):
    with _quiet.quietly(False):
        os.write(2, b"verbose\n")
    assert capfd.readouterr().err == "verbose\n"


def test_the_level_a_user_set_wins(monkeypatch):
    monkeypatch.setenv(_quiet.LEVEL, "1")
    _quiet.quiet_environment()
    assert os.environ[_quiet.LEVEL] == "1"
    monkeypatch.delenv(_quiet.LEVEL)
    _quiet.quiet_environment()
    assert os.environ[_quiet.LEVEL] == "3"
