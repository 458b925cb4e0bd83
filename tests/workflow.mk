# tests/: workflow
