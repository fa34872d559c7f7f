"""The README's demo command works end to end."""

from __future__ import annotations

from helpers import run_python


def test_demo_brings_every_copy_back_identical_and_shows_keras_failing():
    out = run_python("import sys; from keras_pickle.cli import main; sys.exit(main(['demo']))", timeout=500)
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") >= 3}
    assert "0 / 2" in rows["copies trained and returned"].split("│")[2]
    assert "2 / 2" in rows["copies trained and returned"].split("│")[3]
    assert "2 / 2" in rows["identical to local training"].split("│")[3]
    assert "Could not locate class 'Gate'" in out
