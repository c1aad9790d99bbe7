"""Sphinx configuration of the documentation site (`make docs`): the Markdown pages of docs/ through MyST."""

project = "tf_msemb"
author = "the tf_msemb team"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
# Every page's headings down to ### get anchors, so `page.md#heading` links resolve (and fail the build when not).
myst_heading_anchors = 3
