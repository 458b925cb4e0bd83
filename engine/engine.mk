# engine/: the core library every program links, and cairnd.
noinst_LIBRARIES += engine/libcairn.a
engine_libcairn_a_SOURCES = \
	engine/log.c engine/log.h \
	engine/util.c engine/util.h \
	engine/pgq.c engine/pgq.h \
	engine/workflow.c engine/workflow.h \
	engine/migrate.c engine/migrate.h
nodist_engine_libcairn_a_SOURCES = engine/sqlfiles.c
BUILT_SOURCES += engine/sqlfiles.c
CLEANFILES += engine/sqlfiles.c
SQL_FILES = $(sort $(wildcard $(srcdir)/sql/[0-9][0-9][0-9]_*.sql))
EXTRA_DIST += sql tools/embed-sql
engine/sqlfiles.c: $(SQL_FILES) $(srcdir)/tools/embed-sql
	$(AM_V_GEN)mkdir -p engine && $(SHELL) $(srcdir)/tools/embed-sql $(SQL_FILES) > $@.tmp && mv $@.tmp $@

CAIRN_LIBS = engine/libcairn.a $(PQ_LIBS) $(EVENT_LIBS) $(JANSSON_LIBS) $(CRYPTO_LIBS) -lm

include engine/cairnd.mk
