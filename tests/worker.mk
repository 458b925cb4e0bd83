# tests/: worker
