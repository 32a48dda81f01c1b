"""Text analysis shared by indexing and querying: one analyzer, so both sides always agree.

Lower-case, split on Unicode word characters, segment CJK runs with jieba, drop English
stopwords and question words, stem English with Snowball (Porter2). The output is a list
of plain tokens made of word characters only, so it can be quoted safely into any
full-text query language: no user string can inject an operator.
"""
from __future__ import annotations

import functools
import logging
import re
import threading
import unicodedata

import snowballstemmer

# Bump when analyze() produces different tokens: persisted text-index snapshots made from the
# old output are then rejected and rebuilt (search/bm25/text_index.py).
ANALYZER_VERSION = 1

_TOKEN_RE = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_CJK_RUN_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")

STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren as at be because been before
    being below between both but by can cannot could couldn did didn do does doesn doing don down
    during each few for from further had hadn has hasn have haven having he her here hers herself
    him himself his how i if in into is isn it its itself just let me more most mustn my myself
    no nor not now of off on once only or other ought our ours ourselves out over own same shan
    she should shouldn so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was wasn we were weren what when where
    which while who whom why will with won would wouldn you your yours yourself yourselves
    s t d ll m re ve y also did does get got would could
    的 了 是 在 和 与 及 或 也 都 就 而 把 被 吗 呢 吧 啊 我 你 他 她 它 我们 你们 他们 这 那 这个 那个
    什么 怎么 哪 哪里 谁 为什么 如何 一个""".split()
)

_stem_lock = threading.Lock()
_stemmer = snowballstemmer.stemmer("english")
_jieba = None
_jieba_lock = threading.Lock()


def _segmenter():  # noqa: ANN202 - jieba has no stubs
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba = jieba
    return _jieba


@functools.lru_cache(maxsize=50_000)
def stem(word: str) -> str:
    """Snowball (Porter2) English stem of one lower-case word."""
    with _stem_lock:
        return _stemmer.stemWord(word)


def _cjk_words(run: str) -> list[str]:
    return [w for w in _segmenter().cut_for_search(run) if w.strip()]


_LATIN_RE = re.compile(r"[\u00c0-\u024f\u1e00-\u1eff]")


def _fold_latin(char: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c))


def fold(text: str) -> str:
    """NFKC (full-width ＪＷＴ → JWT), then strip diacritics from Latin letters only
    (café → cafe; kana and hangul keep their marks)."""
    text = unicodedata.normalize("NFKC", text)
    return _LATIN_RE.sub(lambda m: _fold_latin(m.group(0)), text) if _LATIN_RE.search(text) else text


def _split(text: str) -> list[str]:
    words: list[str] = []
    for match in _TOKEN_RE.finditer(fold(text).lower()):
        token = match.group(0)
        if not _CJK_RE.search(token):
            words.append(token)
            continue
        last = 0
        for run in _CJK_RUN_RE.finditer(token):
            if run.start() > last:
                words.append(token[last : run.start()])
            words.extend(_cjk_words(run.group(0)))
            last = run.end()
        if last < len(token):
            words.append(token[last:])
    return words


def words(text: str) -> list[str]:
    """The words of a text as written (lower-cased, CJK segmented), stopwords dropped, not stemmed."""
    return [word for word in _split(text) if word not in STOPWORDS]


def analyze(text: str) -> list[str]:
    """Index/query tokens: CJK segmented, stopwords dropped, English stemmed."""
    tokens = []
    for word in _split(text):
        if word in STOPWORDS:
            continue
        tokens.append(word if _CJK_RE.search(word) or word.isdigit() else stem(word))
    return tokens


def analyze_query(text: str, *, max_terms: int = 32) -> list[str]:
    """Distinct query terms in order of appearance (bounded, so a query stays cheap)."""
    return list(dict.fromkeys(analyze(text)))[:max_terms]
