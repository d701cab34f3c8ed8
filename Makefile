# The README's commands. Every target sets up what it needs on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup test bench lint run clean chaos

# setup.py and the C sources: editing them rebuilds the extensions in place.
$(STAMP): pyproject.toml setup.py $(wildcard klog/*/*.c klog/*/*/*.c klog/*.h)
	bash scripts/setup-system.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The JVM peers (tests/jvm): our Java programs compiled against Kafka's jars (the 4.x release
# its pom.xml pins; the client scenarios again against the 3.x client, -P kafka3), and the
# class paths they run with. Maven's local repository (~/.m2) is the cache.
JVM      := tests/jvm
JVMSTAMP := $(JVM)/target/.built
MVN      := mvn -B -q -Dstyle.color=never -f $(JVM)/pom.xml
$(JVMSTAMP): $(JVM)/pom.xml $(shell find $(JVM)/src -name '*.java') scripts/setup-system.sh
	bash scripts/setup-system.sh
	$(MVN) compile dependency:build-classpath -Dmdep.includeScope=runtime \
		-Dmdep.outputFile=$(CURDIR)/$(JVM)/target/classpath.txt
	$(MVN) -P kafka3 compile dependency:build-classpath -Dmdep.includeScope=runtime \
		-Dmdep.outputFile=$(CURDIR)/$(JVM)/target/kafka3/classpath.txt
	touch $(JVMSTAMP)

setup: $(STAMP) $(JVMSTAMP)

# ruff, then mypy over klog/ (configured in pyproject.toml), then the suite.
test: $(STAMP) $(JVMSTAMP)
	$(PY) -m ruff check klog tests benchmarks examples
	$(PY) -m mypy
	$(PY) -m pytest -q

# A standalone broker on 127.0.0.1:9092 with its data in ./klog-data (Ctrl-C stops it cleanly).
run: $(STAMP)
	$(VENV)/bin/klog broker start

# The chaos harness's long form (needs root): every nemesis for CHAOS_DURATION seconds on
# a 3-node ZooKeeper ensemble; the result in chaos-result.json. CHAOS_SEED replays a run.
CHAOS_DURATION ?= 1800
CHAOS_SEED ?= $(shell date +%s)
chaos: $(STAMP)
	$(PY) -m tests.chaos --seed $(CHAOS_SEED) --duration $(CHAOS_DURATION) --json chaos-result.json

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

lint: $(STAMP)
	$(PY) -m ruff check klog tests benchmarks examples
	$(PY) -m mypy

clean:
	rm -rf $(VENV) build *.egg-info $(JVM)/target
