# worker/: checkpoint
