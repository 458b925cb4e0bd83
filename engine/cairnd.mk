# engine/: cairnd, the engine daemon, and the shared config table parser.
engine_libcairn_a_SOURCES += engine/config.c engine/config.h

bin_PROGRAMS += engine/cairnd
engine_cairnd_SOURCES = \
	engine/cairnd.c \
	engine/http.c engine/http.h \
	engine/api.c engine/api.h \
	engine/duties.c engine/duties.h \
	engine/webhook.c engine/webhook.h
engine_cairnd_LDADD = $(CAIRN_LIBS)
EXTRA_DIST += docs/api.md
engine_libcairn_a_SOURCES += engine/cron.c engine/cron.h engine/schedule.c engine/schedule.h
