import sys
from pathlib import Path

# the synthetic-run builder is shared with the report and UI tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
