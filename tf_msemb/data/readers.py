"""Parallel corpora in the formats they come in, each read as `(src_lang, tgt_lang, rows)` sources for
`writing.write_tfrecords`: `rows` a list of `(src, tgt[, hard negative ...])` tuples.

- `aligned_pairs`: one line-aligned file per language (Multi30k), the pivot paired with every other;
- `tsv_pairs`: `src<TAB>tgt[<TAB>hard negative ...]` lines;
- `tmx_pairs`: a TMX file (OPUS's `.tmx`), one `<tu>` a pair, its `<tuv xml:lang=..>` segments the sides;
- `moses_pairs`: OPUS's Moses format, `<name>.<src>` and `<name>.<tgt>` aligned files or the `.zip` holding them;
- `parallel_directory_pairs`: a corpus directory of `<xx>-en/{xx,en,origin}` files (`../shared/data/parallel`),
  whole origins (test sets, books) held out by name.

Every file may be gzip. A record that lacks a side (a TSV line with one field, a `<tu>` without the language) or a
line that is not UTF-8 is a CorpusError naming the file and line; a side that is present but blank is left to
`writing.clean_row`, which drops and counts it (aligned files mark a missing sentence with an empty line).
"""

import os
import xml.parsers.expat
import zipfile
from typing import NamedTuple

from tf_msemb.text_files import CorpusError
from tf_msemb.text_files import decode_lines
from tf_msemb.text_files import open_bytes
from tf_msemb.text_files import read_lines


def _aligned(src_name, src_lines, tgt_name, tgt_lines):
    if len(src_lines) != len(tgt_lines):
        raise CorpusError(f"Line counts differ: {src_name} has {len(src_lines)} lines, {tgt_name} has "
                          f"{len(tgt_lines)}; aligned files must match line by line.")
    return list(zip(src_lines, tgt_lines))


def language_inputs(specs):
    """`{lang: path}` of `--input=LANG:PATH` specs; a malformed spec or a language given twice is a CorpusError."""
    files = {}
    for spec in specs:
        lang, sep, path = spec.partition(":")
        if not sep or not lang or not path:
            raise CorpusError(f"--input={spec!r} is not LANG:PATH.")
        if lang in files:
            raise CorpusError(f"--input gives {lang} twice ({files[lang]} and {path}): one file a language.")
        files[lang] = path
    return files


def aligned_pairs(files_by_language, pivot):
    """Pairs the pivot language's lines with every other language's lines.

    `files_by_language` maps a language tag to a line-aligned file (one file
    per language, as Multi30k ships). Yields `(pivot, lang, rows)`.
    """
    if pivot not in files_by_language:
        raise CorpusError(f"Pivot language {pivot!r} has no input file; given: {sorted(files_by_language)}")
    if len(files_by_language) < 2:
        raise CorpusError("Aligned input needs at least two languages (--input=LANG:PATH twice or more).")
    pivot_lines = read_lines(files_by_language[pivot])
    for lang, path in files_by_language.items():
        if lang != pivot:
            yield pivot, lang, _aligned(files_by_language[pivot], pivot_lines, path, read_lines(path))


def tsv_pairs(path, src_lang, tgt_lang):
    """Reads `src<TAB>tgt[<TAB>hard negative ...]` lines."""
    rows = []
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) < 2:
            raise CorpusError(f"{path}:{number}: expected at least 2 tab-separated fields, got {len(fields)}.")
        rows.append(tuple(fields))
    yield src_lang, tgt_lang, rows


def _language_matches(tag, lang):
    """`de-DE`, `de_de` and `DE` are `de`; `pt-BR` is `pt-br` and `pt`."""
    tag = tag.lower().replace("_", "-")
    return tag == lang.lower() or tag.split("-")[0] == lang.lower()


# TMX's inline codes: their text is the original file's markup, not the sentence's.
_TMX_CODES = {"bpt", "ept", "ph", "it", "ut"}


class TranslationUnit(NamedTuple):
    """One `<tu>` of a TMX file: its first line, its sides (`None` for a language it lacks) and the languages of
    the segments it has."""

    line: int
    sides: tuple
    languages: list

    def missing_side(self, langs):
        """Why this unit is not a row of `langs` ("no <tuv xml:lang='en'> segment (it has [...])"), or None."""
        lang = next((lang for lang, side in zip(langs, self.sides) if side is None), None)
        return lang and f"no <tuv xml:lang={lang!r}> segment (it has {self.languages or 'none'})"


def translation_units(stream, name, src_lang, tgt_lang, block=1 << 20):
    """The `<tu>`s of a TMX byte stream, parsed as read (OPUS's large TMX files never sit in memory whole): each
    side the `<seg>` of the `<tuv>` whose `xml:lang` (or TMX 1.1's `lang`) is the language (`de` matches `de-DE`),
    inline codes left out. A stream that is not well-formed XML is a CorpusError naming `name` and the line."""
    parser = xml.parsers.expat.ParserCreate()
    units, state = [], {"tu": None, "lang": None, "seg": None, "codes": 0}

    def start(tag, attributes):
        if tag == "tu":
            state["tu"] = (parser.CurrentLineNumber, {})
        elif tag == "tuv":
            state["lang"] = attributes.get("xml:lang") or attributes.get("lang") or ""
        elif tag == "seg":
            state["seg"] = []
        elif tag in _TMX_CODES and state["seg"] is not None:
            state["codes"] += 1

    def text(data):
        if state["seg"] is not None and not state["codes"]:
            state["seg"].append(data)

    def end(tag):
        if tag == "seg" and state["tu"]:
            state["tu"][1].setdefault(state["lang"], "".join(state["seg"]))
            state["seg"] = None
        elif tag in _TMX_CODES and state["seg"] is not None:
            state["codes"] -= 1
        elif tag == "tu":
            line, segments = state["tu"]
            sides = tuple(next((seg for lang_tag, seg in segments.items() if _language_matches(lang_tag, lang)),
                               None) for lang in (src_lang, tgt_lang))
            units.append(TranslationUnit(line, sides, sorted(segments)))
            state["tu"] = None

    parser.StartElementHandler, parser.CharacterDataHandler, parser.EndElementHandler = start, text, end
    try:
        while True:
            data = stream.read(block)
            parser.Parse(data, not data)
            yield from units
            units.clear()
            if not data:
                return
    except xml.parsers.expat.ExpatError as e:
        raise CorpusError(f"{name}:{e.lineno}: not well-formed TMX ({xml.parsers.expat.ErrorString(e.code)}).") \
            from None


def tmx_pairs(path, src_lang, tgt_lang):
    """A TMX file (`translation_units`) as one `(src_lang, tgt_lang, rows)` source; a `<tu>` without one of the
    languages is a CorpusError naming the file and line."""
    rows = []
    with open_bytes(path) as f:
        try:
            for unit in translation_units(f, path, src_lang, tgt_lang):
                missing = unit.missing_side((src_lang, tgt_lang))
                if missing:
                    raise CorpusError(f"{path}:{unit.line}: this <tu> has {missing}.")
                rows.append(unit.sides)
        except (OSError, EOFError) as e:
            raise CorpusError(f"Cannot read {path}: {e}") from None
    if not rows:
        raise CorpusError(f"{path}: no <tu> translation units.")
    yield src_lang, tgt_lang, rows


def _zip_member(archive, names, path, lang):
    """The one member of the Moses zip that is the `lang` side (`*.<lang>`)."""
    found = [name for name in names if name.endswith(f".{lang}")]
    if len(found) != 1:
        raise CorpusError(f"{path}: expected one file ending in .{lang} (OPUS's Moses zip), found "
                          f"{found or 'none'} among {names}.")
    return found[0], decode_lines(archive.read(found[0]), f"{path}:{found[0]}")


def moses_zip_rows(stream, name, src_lang, tgt_lang):
    """The aligned `(src, tgt)` rows of OPUS's Moses `.zip` (its `*.<src>` and `*.<tgt>` members) read from a
    seekable byte stream; `name` is the file's name in errors."""
    try:
        with zipfile.ZipFile(stream) as archive:
            names = archive.namelist()
            (src_name, src), (tgt_name, tgt) = (_zip_member(archive, names, name, lang)
                                                for lang in (src_lang, tgt_lang))
    except zipfile.BadZipFile as e:
        raise CorpusError(f"Cannot read {name} as a zip file: {e}") from None
    return _aligned(f"{name}:{src_name}", src, f"{name}:{tgt_name}", tgt)


def moses_pairs(path, src_lang, tgt_lang):
    """OPUS's Moses format: `path` is the `.zip` OPUS serves (`moses_zip_rows`), or the common name of two aligned
    files `<path>.<src>` and `<path>.<tgt>` (either may be gzip: `<path>.<src>.gz`)."""
    if os.fspath(path).endswith(".zip"):
        with open_bytes(path) as f:
            yield src_lang, tgt_lang, moses_zip_rows(f, path, src_lang, tgt_lang)
        return
    src_file, tgt_file = (_plain_or_gzip(f"{path}.{lang}") for lang in (src_lang, tgt_lang))
    yield src_lang, tgt_lang, _aligned(src_file, read_lines(src_file), tgt_file, read_lines(tgt_file))


def _plain_or_gzip(path):
    """`path` if it exists, else `path.gz`, else a CorpusError naming both."""
    for name in (path, f"{path}.gz"):
        if os.path.exists(name):
            return name
    raise CorpusError(f"Found no {path} or {path}.gz.")


def parallel_directory_pairs(corpus_dir, languages=None, held_out=(), pivot="en"):
    """The pairs of a corpus directory laid out as `../shared/data/parallel`'s: `<xx>-<pivot>/` holding
    `<xx>.txt[.gz]`, `<pivot>.txt[.gz]` and `origin.tsv[.gz]` (line i: the test set, book or verse pair i came
    from, in its first column). Yields `(pivot, xx, rows)` (the Multi30k records' direction, `en-de`) for each
    language (all, or `languages`), leaving out every pair whose origin is in `held_out`: whole test sets kept
    for dev, never lines of one."""
    if not os.path.isdir(corpus_dir):
        raise CorpusError(f"Corpus directory not found: {corpus_dir}")
    suffix = f"-{pivot}"
    found = sorted(name[:-len(suffix)] for name in os.listdir(corpus_dir)
                   if name.endswith(suffix) and os.path.isdir(os.path.join(corpus_dir, name)))
    unknown = sorted(set(languages or ()) - set(found))
    if unknown or not found:
        raise CorpusError(f"{corpus_dir}: no <xx>{suffix}/ directory for {unknown or 'any language'} "
                          f"(found {found or 'none'}).")
    held_out = set(held_out)
    for lang in languages or found:
        directory = os.path.join(corpus_dir, f"{lang}{suffix}")
        other, english, origin_file = (_plain_or_gzip(os.path.join(directory, name))
                                       for name in (f"{lang}.txt", f"{pivot}.txt", "origin.tsv"))
        rows = _aligned(english, read_lines(english), other, read_lines(other))
        origins = [line.split("\t")[0] for line in read_lines(origin_file)]
        if len(origins) != len(rows):
            raise CorpusError(f"Line counts differ: {origin_file} has {len(origins)} lines, {english} has "
                              f"{len(rows)}; origin.tsv names each pair's origin.")
        yield pivot, lang, [row for row, origin in zip(rows, origins) if origin not in held_out]
