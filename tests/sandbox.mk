# tests/: sandbox
