"""Recall gating: is a chat message worth searching memory for?

Greetings, thanks, acknowledgements, laughter, farewells, emoji and punctuation in English and
Chinese carry no question: recalling for them only injects noise into an agent's prompt. The
rule is deliberately conservative — skipping a real question loses context, recalling for
"thanks!" only costs a search — so a message is skipped only when *every* word of it is small
talk. Anything else (a question word, a name, a number, one content word) is searched.
Measured on tests/search/gating_messages.jsonl (docs/retrieval.md).

A short follow-up ("and the other one?") has too few words to search on: with its thread it
borrows the last turns as query context (:func:`expand_follow_up`).
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from memories.analyzer import analyze_query

# Small talk by itself: single words (space-separated) and phrases ("|"-separated), by reason.
# A message is skipped when it is made of these and nothing else.
_WORDS = {
    "greeting": "hi hello hey heya hiya yo sup howdy hallo hola morning evening afternoon gm",
    "thanks": "thanks thx ty tysm thankyou cheers appreciated ta",
    "acknowledgement": """ok okay k kk yes yeah yep yup yea no nope nah sure right alright fine cool nice great good
        awesome perfect lovely excellent wonderful neat sweet noted gotcha understood agreed indeed exactly true
        correct same ditto roger wow whoa oh ah hmm hm mhm uh um meh welp ugh oops np totally absolutely definitely""",
    "laughter": "lol lmao lmfao rofl haha hahaha hahahaha hehe hehehe heh xd lolol",
    "farewell": "bye goodbye cya ttyl gtg later laters night gn",
    "greeting_zh": "你好 您好 嗨 哈喽 哈啰 早 早啊 早安 早上好 上午好 中午好 下午好 晚上好 在吗 在不在 在么 你好啊 大家好",
    "thanks_zh": "谢谢 谢谢你 谢谢您 多谢 感谢 感谢你 谢了 谢啦 辛苦了 辛苦 太感谢了 非常感谢 谢谢啦",
    "acknowledgement_zh": """好 好的 好滴 好哒 好吧 好嘞 嗯 嗯嗯 恩 恩恩 哦 哦哦 噢 啊 对 对的 对啊 是 是的 是啊 行 可以 没问题
        收到 了解 明白 知道了 懂了 好的呢 嗯呢 好呀 好啊 不错 厉害 牛 赞 棒 太棒了 真棒 可以的 没事 没关系 不客气 客气了""",
    "laughter_zh": "哈 哈哈 哈哈哈 哈哈哈哈 呵呵 嘿嘿 嘻嘻 笑死 233 2333 23333",
    "farewell_zh": "再见 拜拜 拜 晚安 回头聊 下次聊 先这样 溜了 88 886",
}
_PHRASE_LISTS = {
    "greeting": """good morning|good afternoon|good evening|good day|hi there|hello there|hey there|what's up|whats up|
        how are you|how are you doing|how's it going|hows it going|how r u|how are u|how have you been|
        nice to meet you|long time no see|you there|are you there""",
    "thanks": """thank you|thank you so much|thanks a lot|thanks so much|many thanks|much appreciated|thanks again|
        thank you very much|thanks a bunch|ok thanks|okay thanks|ok thank you|great thanks|perfect thanks""",
    "acknowledgement": """got it|sounds good|all good|no problem|no worries|of course|will do|makes sense|fair enough|
        i see|oh i see|i know|good to know|nice one|well done|good job|great job|that's great|thats great|
        that's nice|thats nice|that's cool|thats cool|that's awesome|sounds great|not bad|me too|same here|
        you're welcome|youre welcome|my pleasure|no thanks|ok cool|okay cool|cool thanks|ok got it|yes please|
        sure thing|right on|for sure|ok sure|oh ok|oh okay|ah ok|ah okay|ok ok""",
    "farewell": """see you|see ya|see you later|see you soon|talk later|talk soon|good bye|bye bye|take care|
        have a nice day|have a good day|have a good one|good night|sleep well|catch you later""",
}
PHRASES: dict[str, str] = {}
for _reason, _words in _WORDS.items():
    PHRASES.update(dict.fromkeys(_words.split(), _reason.removesuffix("_zh")))
for _reason, _phrases in _PHRASE_LISTS.items():
    PHRASES.update({" ".join(p.split()): _reason for p in _phrases.split("|") if p.strip()})

_STRIP = re.compile(r"[^\w\s'\u4e00-\u9fff]+", re.UNICODE)
_REPEAT = re.compile(r"(\w)\1{2,}")  # "sooo" → "so", "hiii" → "hi", "okkk" → "ok"
_QUESTION_ZH = re.compile(r"[吗呢么]|什么|怎么|哪|谁|几|多少|为什么|如何|是否|有没有")
_QUESTION_EN = re.compile(r"\b(?:what|when|where|who|whom|whose|which|why|how|did|does|do|is|are|was|were|can|could|"
                          r"should|would|will|remember|recall|tell)\b")


def _is_emoji_or_punctuation(text: str) -> bool:
    return all(unicodedata.category(c)[0] in "PSZC" for c in text) and bool(text.strip())


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower().strip()
    text = _STRIP.sub(" ", text)
    text = _REPEAT.sub(r"\1", text)
    return " ".join(text.split())


def _phrase_reason(text: str) -> str | None:
    """The reason when the whole text is small-talk phrases (greedy, longest phrase first)."""
    words = text.split()
    reasons: list[str] = []
    i = 0
    while i < len(words):
        for size in (5, 4, 3, 2, 1):
            phrase = " ".join(words[i:i + size])
            if len(words) - i >= size and phrase in PHRASES:
                reasons.append(PHRASES[phrase])
                i += size
                break
        else:
            return None
    return reasons[0] if reasons else None


def _chinese_reason(text: str) -> str | None:
    """Chinese has no spaces: peel known phrases off the text, longest first."""
    compact = text.replace(" ", "")
    reasons = []
    while compact:
        for size in range(min(len(compact), 5), 0, -1):
            if compact[:size] in PHRASES:
                reasons.append(PHRASES[compact[:size]])
                compact = compact[size:]
                break
        else:
            return None
    return reasons[0] if reasons else None


def skip_reason(message: str) -> str | None:
    """Why recalling for this message is pointless ("greeting", "thanks", "acknowledgement",
    "laughter", "farewell", "emoji", "empty"), or None when it may ask for memory."""
    if not message.strip():
        return "empty"
    if _is_emoji_or_punctuation(message):
        return "emoji"
    text = _normalise(message)
    if not text:
        return "emoji"
    if "?" in message and _QUESTION_EN.search(text) and _phrase_reason(text) is None:
        return None
    if _QUESTION_ZH.search(text.replace(" ", "")) and text.replace(" ", "") not in PHRASES:
        return None
    if re.search(r"\d", text) and text not in PHRASES:
        return None
    return _phrase_reason(text) or _chinese_reason(text)


FOLLOW_UP_TERMS = 3  # a query with fewer content terms borrows its thread's last turns
FOLLOW_UP_TURNS = 4


def is_follow_up(query: str) -> bool:
    return len(analyze_query(query)) < FOLLOW_UP_TERMS


def expand_follow_up(query: str, recent: Sequence[str]) -> str:
    """The query text with the thread's last turns before it (oldest first)."""
    return "\n".join([*recent[-FOLLOW_UP_TURNS:], query])
