# worker/: sandbox
