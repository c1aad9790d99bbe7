"""Bitext mining at scale: pools of millions of vectors on one machine.

`synthetic` fits a generative model to real sentence vectors and expands it
into benchmark pools with planted translation pairs; the search, margins and
selection themselves are `evaluation.search` and `evaluation.mining`.
"""
