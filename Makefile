# Olympia developer commands. `make demo` and `make test` work on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
WAREHOUSE ?= $(CURDIR)/warehouse
# where `olympia apply` creates the example Iceberg tables (the catalog's warehouse property;
# Olympia expiry never deletes Iceberg files, even under the catalog's folder)
TABLES ?= file://$(WAREHOUSE)/tables
# Apache Iceberg's Spark runtime and its S3 file IO, for the tests of Spark SQL against
# `olympia serve`: Maven artifacts put in $(VENV)/jars (checked against requirements/jars.sha256)
ICEBERG_VERSION := 1.12.0
JARS := org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:$(ICEBERG_VERSION) \
	org.apache.iceberg:iceberg-aws-bundle:$(ICEBERG_VERSION)
# storage emulators the tests start: Google Cloud Storage (a Go module, built here) and
# Azure Blob Storage (Azurite, from requirements/npm's lock file)
FAKE_GCS := github.com/fsouza/fake-gcs-server@v1.56.1
PYTEST_ARGS ?=
# pytest-xdist workers: the suite's Spark, S3 and Airflow tests wait on I/O and JVMs, so two
# workers on a 2-core machine roughly halve its time (WORKERS=0 runs in one process)
WORKERS ?= 2

.PHONY: install demo test lint typecheck proto proto-check schema lock bench clean

install: $(VENV)/.installed

$(VENV)/.installed: requirements/constraints.txt requirements/jars.sha256 pyproject.toml \
		requirements/npm/package-lock.json
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv==0.13.9
	$(UV) pip install --quiet --python $(PY) -r requirements/constraints.txt
	$(UV) pip install --quiet --python $(PY) --no-deps -e .
	for artifact in $(JARS); do \
		mvn --batch-mode --quiet dependency:copy -Dartifact=$$artifact \
			-DoutputDirectory=$(VENV)/jars || exit 1; \
	done
	cd $(VENV)/jars && sha256sum --check --quiet $(CURDIR)/requirements/jars.sha256
	GOBIN=$(abspath $(VENV))/bin GOPATH=$(abspath $(VENV))/go GOFLAGS=-modcacherw \
		go install $(FAKE_GCS)
	mkdir -p $(VENV)/npm
	cp requirements/npm/package.json requirements/npm/package-lock.json $(VENV)/npm/
	npm ci --prefix $(VENV)/npm --no-audit --no-fund --silent
	touch $@

demo: install
	$(VENV)/bin/olympia init --catalog $(WAREHOUSE) --if-not-exists --property warehouse=$(TABLES)
	$(VENV)/bin/olympia validate examples/catalog --var-file examples/vars.yaml
	$(VENV)/bin/olympia plan --catalog $(WAREHOUSE) examples/catalog --var-file examples/vars.yaml --out $(WAREHOUSE).plan.json
	$(VENV)/bin/olympia apply --catalog $(WAREHOUSE) $(WAREHOUSE).plan.json --auto-approve
	$(PY) examples/append_and_read.py $(WAREHOUSE)
	$(VENV)/bin/olympia log --catalog $(WAREHOUSE) --limit 5

test: install
	$(PY) -m pytest -n $(WORKERS) --durations=25 $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

typecheck: lint

proto: install
	$(PY) olympia/_proto/generate.py

proto-check: install
	$(PY) olympia/_proto/generate.py --check

# Write the spec keys olympia/spec/fields.py describes into specs/olympia-spec.schema.json.
schema: install
	$(PY) -c "from olympia.spec.schema import write_schema; write_schema()"

# Re-resolve the pinned dependency set after editing requirements/requirements.in.
lock: install
	$(UV) pip compile --quiet --python-version 3.11 --no-header \
		requirements/requirements.in -o requirements/constraints.txt

bench: install
	$(PY) -m benchmarks $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
