"""What leaves a run: its published reports with their index, and its signed evidence bundle."""
