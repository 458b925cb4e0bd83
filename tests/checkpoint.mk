# tests/: checkpoint
