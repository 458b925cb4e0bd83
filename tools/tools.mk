# tools/: tools
