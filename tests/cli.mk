# tests/: cli
