"""bakeoff's hardware emulator (serving/emulator/) as a stack: run by the local provider, never on a cloud
node; it says ``bakeoff-emulator`` in /version and exports vLLM's metric names."""

from __future__ import annotations

import re

from bakeoff.engines.base import Engine, Names

# read from /version only: its model cards' owner was never taken for the engine
ENGINE = Engine(name="emulator", names=Names(re.compile(r"bakeoff-emulator"), in_model_cards=False), precedence=0)
