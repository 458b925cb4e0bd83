# tests/: engine
