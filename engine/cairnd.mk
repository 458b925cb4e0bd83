# engine/: cairnd, the engine daemon, and the shared config table parser.
engine_libcairn_a_SOURCES += engine/config.c engine/config.h
