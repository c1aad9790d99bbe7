"""The train loop and what it needs: strategies, optimizers, schedules, progress."""
