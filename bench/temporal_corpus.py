"""The generated store of bench/temporal.py: entities whose attributes change over time.

``generate(seed, ...)`` builds, from one ``random.Random(seed)`` and nothing else, a corpus of

- **chains**: one attribute of one entity (a person's home city, a company's CEO, a service's
  database, a project's lead...) and the values it took one after another, each with the time it
  became true (``valid_from``). Entities are people, companies, services and projects, in English
  or Chinese; their names, the attributes each has, the values, the number of versions (1-6) and
  the gaps between them are drawn per seed;
- **facts**: one statement per version, phrased by one of many templates per attribute and
  language (word orders, paraphrases, "moved from X to Y" forms naming the old value, an optional
  date phrase), with the fact key an agent would give it (its spelling varies: case and spacing
  are left to the product's normalisation);
- **notes**: unrelated memories (preferences, meetings, incidents, decisions), some naming the
  same entities, in both languages;
- the **arrival order**: facts mostly arrive in time order, interleaved with the notes, but a share
  arrives late (after a newer version of the same chain);
- **questions** of three kinds, phrased variously: ``current`` ("Where does Alice live now?"),
  ``as_of`` (a time drawn at random over the chain's life, some on a version's first instant, some
  as a bare date, which means the end of that day) and ``history`` (the whole chain).

Nothing reads the clock, the environment or a global random state: one seed, one corpus
(``python bench/temporal_corpus.py --seed 7 --check`` generates twice and compares the digests).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, time, timedelta

START = datetime(2022, 1, 1, tzinfo=UTC)
LATEST_START = datetime(2025, 3, 1, tzinfo=UTC)
END = datetime(2026, 11, 15, tzinfo=UTC)  # no version starts after this; as_of times stay before it
MIN_GAP_DAYS, MAX_GAP_DAYS = 12, 260  # >= 2 days, so a bare as_of date never holds two versions' starts
CHAIN_LENGTHS = ((1, 0.08), (2, 0.22), (3, 0.28), (4, 0.22), (5, 0.12), (6, 0.08))
LATE_SHARE = 0.10  # facts that arrive after a newer version of their chain
CHINESE_SHARE = 0.3
LOWER_AFTER_PREFIX = ("The", "We", "Traffic", "Production", "Home", "New", "Ownership", "Status", "After")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")

# --------------------------------------------------------------------------- vocabulary

FIRST = ("Alice", "Bruno", "Chloé", "Dana", "Elif", "Farah", "Gustavo", "Hana", "Ivan", "Jonas", "Keiko", "Luis",
         "Maya", "Nikhil", "Olga", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yusuf",
         "Zoe", "Amara", "Björn", "Carmen", "Dmitri", "Esther", "Femi", "Grace", "Hiro", "Ines", "Jamal", "Kofi",
         "Lena", "Mateo", "Nadia", "Oscar", "Paula", "Rahul", "Sofia", "Tomas", "Valeria", "Wojciech", "Ximena",
         "Yara", "Zainab", "Arjun", "Beatriz", "Colm", "Daria", "Emeka", "Freya", "Goran", "Hélène", "Ilse")
LAST = ("Chen", "Okafor", "Müller", "Silva", "Kowalski", "Nakamura", "Haddad", "Johansson", "Rossi", "Novak",
        "Fernández", "Patel", "Dubois", "Kim", "Ivanova", "O'Brien", "Santos", "Yilmaz", "Larsen", "Moreau",
        "Tanaka", "Schmidt", "Costa", "Nguyen", "Abara", "Lindqvist", "Mensah", "Petrov", "García", "Horvat",
        "Baptiste", "Kaur", "Romero", "Fischer", "Andersen", "Bianchi", "Kovač", "Sato", "Ward", "Ortiz")
ZH_SURNAMES = "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蒋蔡余杜叶程苏魏吕丁任沈姚卢"
ZH_GIVEN = ("伟", "芳", "娜", "敏", "静", "丽", "强", "磊", "军", "洋", "勇", "艳", "杰", "娟", "涛", "明", "超", "秀英",
            "霞", "平", "刚", "桂英", "文", "华", "晨", "宇", "欣怡", "子涵", "浩然", "梓轩", "雨桐", "一鸣", "思远",
            "嘉怡", "俊杰", "佳琪", "志强", "海燕", "建国", "晓东")
SYLLABLES = ("nor", "vex", "ka", "lum", "tri", "zen", "or", "bal", "qui", "sta", "mer", "ion", "vel", "dra", "pix",
             "cor", "ta", "nex", "ar", "lo", "sol", "fin", "gra", "ny", "pol", "ris", "ux", "ven", "tal", "mo")
COMPANY_SUFFIX = ("Labs", "Systems", "Analytics", "Robotics", "Health", "Logistics", "Software", "Energy", "Capital",
                  "Networks", "Foods", "Media", "Bio", "Dynamics", "Works")
ZH_COMPANY_HEAD = ("星", "云", "华", "创", "智", "达", "恒", "鼎", "天", "海", "博", "瑞", "联", "新", "金", "盛", "越", "驰",
                   "远", "启", "明", "光", "信", "安")
ZH_COMPANY_TAIL = ("科技", "网络", "集团", "数据", "软件", "智能", "物流", "传媒", "生物", "能源")
SERVICE_HEAD = ("checkout", "billing", "auth", "search", "ledger", "pricing", "inventory", "notification", "webhook",
                "media", "payments", "session", "catalog", "shipping", "reporting", "identity", "feature-flag",
                "recommendation", "geocoding", "invoice", "audit", "telemetry", "export", "thumbnail", "quota")
SERVICE_TAIL = ("service", "API", "gateway", "worker", "daemon", "pipeline", "backend", "indexer", "dispatcher")
ZH_SERVICE_HEAD = ("支付", "订单", "用户", "搜索", "消息", "库存", "结算", "风控", "推荐", "物流", "认证", "报表", "日志", "会员")
ZH_SERVICE_TAIL = ("服务", "系统", "平台", "网关")
PROJECT_WORDS = ("Falcon", "Atlas", "Nimbus", "Orion", "Bluebird", "Cobalt", "Juniper", "Kestrel", "Lighthouse",
                 "Mosaic", "Nebula", "Obsidian", "Pelican", "Quasar", "Redwood", "Saffron", "Tundra", "Umbra",
                 "Vanguard", "Willow", "Zephyr", "Aurora", "Basalt", "Cinder", "Dune", "Ember", "Fjord", "Granite",
                 "Harbor", "Iris", "Jasper", "Lotus", "Meridian", "Onyx", "Prism", "Sequoia", "Tidal", "Vertex")
PROJECT_FORMS = ("Project {w}", "{w}", "the {w} project", "{w} initiative", "Operation {w}", "{w} 2.0")
ZH_PROJECT_WORDS = ("凤凰", "长城", "北斗", "天河", "飞鸿", "青松", "星火", "蓝鲸", "远航", "磐石", "追光", "银河", "灯塔",
                    "晨曦", "雄鹰", "锦鲤", "白鹭", "昆仑", "赤兔", "玄武")
CITIES = ("Paris", "Berlin", "Lisbon", "Madrid", "Toronto", "Vancouver", "Seoul", "Tokyo", "Osaka", "Singapore",
          "Sydney", "Melbourne", "Nairobi", "Lagos", "Cape Town", "São Paulo", "Buenos Aires", "Mexico City",
          "Chicago", "Austin", "Denver", "Seattle", "Boston", "Dublin", "Edinburgh", "Amsterdam", "Copenhagen",
          "Stockholm", "Oslo", "Helsinki", "Warsaw", "Prague", "Vienna", "Zurich", "Milan", "Barcelona", "Istanbul",
          "Dubai", "Mumbai", "Bangalore", "Hanoi", "Taipei", "Auckland", "Montreal", "Lyon", "Munich", "Krakow")
ZH_CITIES = ("北京", "上海", "广州", "深圳", "杭州", "成都", "武汉", "南京", "西安", "苏州", "重庆", "天津", "厦门",
             "青岛", "长沙", "合肥", "郑州", "昆明", "大连", "宁波", "珠海", "福州", "济南", "沈阳")
ROLES = ("staff engineer", "senior backend engineer", "engineering manager", "product designer", "data scientist",
         "site reliability engineer", "tech lead", "QA analyst", "solutions architect", "product manager",
         "VP of Engineering", "CTO", "security engineer", "developer advocate", "machine learning engineer",
         "frontend engineer", "principal engineer", "head of data", "support engineer", "release manager")
ZH_ROLES = ("高级工程师", "产品经理", "技术总监", "数据分析师", "架构师", "测试工程师", "运维工程师", "项目经理", "前端工程师",
            "算法工程师", "设计师", "首席技术官", "安全工程师", "技术负责人")
EDITORS = ("VS Code", "Neovim", "Emacs", "IntelliJ IDEA", "Zed", "Sublime Text", "Helix", "PyCharm", "Cursor",
           "Xcode", "GoLand", "WebStorm", "Vim", "Android Studio")
DATABASES = ("PostgreSQL", "MySQL", "MongoDB", "DynamoDB", "CockroachDB", "Cassandra", "MariaDB", "ScyllaDB",
             "ClickHouse", "Spanner", "TiDB", "Couchbase", "Neo4j", "FoundationDB", "YugabyteDB")
GATEWAYS = ("Kong", "Envoy", "nginx", "Traefik", "HAProxy", "Apigee", "Caddy", "Tyk", "KrakenD", "Istio ingress",
            "AWS API Gateway", "Azure Front Door")
CLOUDS = ("AWS", "Google Cloud", "Azure", "Hetzner", "OVHcloud", "DigitalOcean", "Alibaba Cloud", "Oracle Cloud",
          "Scaleway", "Linode", "IBM Cloud", "Fly.io")
REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-1", "ap-southeast-2",
           "ap-northeast-1", "sa-east-1", "ca-central-1", "eu-north-1", "me-south-1", "af-south-1")
TEAMS = ("platform", "billing", "search", "mobile", "data", "growth", "payments", "infrastructure", "identity",
         "security", "developer experience", "storage", "observability", "commerce", "risk")
ZH_TEAMS = ("平台组", "支付组", "数据组", "搜索组", "基础架构组", "安全组", "移动端组", "增长组", "运维组", "风控组")
LANGUAGES = ("Go", "Rust", "Python", "Kotlin", "TypeScript", "Java", "Elixir", "C#", "Scala", "Swift", "Ruby", "Zig")
STATUSES = ("discovery", "planning", "prototype", "private beta", "public beta", "code freeze", "general availability",
            "maintenance", "on hold", "pilot")
ZH_STATUSES = ("立项", "需求分析", "开发中", "内测", "公测", "已上线", "维护期", "暂停", "试点")
PLANS = ("Pro", "Team", "Business", "Starter", "Premium", "Enterprise")
ZH_PLANS = ("专业版", "团队版", "企业版", "基础版", "高级版")
DRINKS = ("oat-milk flat white", "green tea", "espresso", "sparkling water", "chai", "cold brew", "rooibos")
FOODS = ("peanuts", "shellfish", "gluten", "lactose", "sesame", "kiwi", "soy")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
FEATURES = ("dark mode", "SSO login", "CSV export", "offline sync", "audit trail", "bulk import", "two-factor login",
            "usage dashboard", "webhook retries", "saved searches")
HOBBIES = ("bouldering", "sourdough baking", "chess", "trail running", "birdwatching", "pottery", "salsa dancing",
           "film photography", "sailing", "board games")


# --------------------------------------------------------------------------- attributes


@dataclass(frozen=True)
class Phrasing:
    """Templates of one attribute in one language. ``{e}`` the entity, ``{v}`` the value, ``{old}``
    the previous value (``change`` only), ``{p}`` the chain's own extra word (a plan's name)."""

    first: tuple[str, ...]  # any version
    change: tuple[str, ...]  # a later version (names the one before)
    current: tuple[str, ...]
    past: tuple[str, ...]
    history: tuple[str, ...]


@dataclass(frozen=True)
class Attribute:
    name: str
    kind: str  # person | company | service | project
    values: tuple[str, ...] | str  # a pool, or the name of a generated pool ("person", "company", "version", "price", ...)
    zh_values: tuple[str, ...] | str
    key_labels: tuple[str, ...]
    en: Phrasing
    zh: Phrasing
    extra: tuple[str, ...] = ()  # {p}: one drawn per chain
    zh_extra: tuple[str, ...] = ()


ATTRIBUTES: tuple[Attribute, ...] = (
    Attribute(
        "city", "person", CITIES, ZH_CITIES, ("home-city", "city", "lives in", "residence", "location"),
        Phrasing(
            ("{e} lives in {v}.", "{e} is based in {v}.", "{v} is where {e} lives.", "{e} has settled in {v}.",
             "Home for {e} is {v}.", "{e} moved to {v}.", "{e} now lives in {v}.", "{e} rents a flat in {v}."),
            ("{e} moved from {old} to {v}.", "{e} left {old} and lives in {v} now.", "After {old}, {e} relocated to {v}.",
             "{e} is no longer in {old}: they moved to {v}.", "New city for {e}: {v} (was {old})."),
            ("Where does {e} live now?", "Which city is {e} based in?", "What is {e}'s current city?",
             "Where is {e} living these days?", "{e} home city", "In which city does {e} live at the moment?"),
            ("Where did {e} live?", "Which city was {e} based in back then?", "{e}'s city at that time",
             "Where was {e} living?", "In which city did {e} live?"),
            ("Where has {e} lived over the years?", "Every city {e} has lived in, in order",
             "{e}'s moves from city to city", "History of where {e} lived"),
        ),
        Phrasing(
            ("{e}住在{v}。", "{e}现在在{v}生活。", "{e}搬到了{v}。", "{e}定居{v}。", "{e}目前常驻{v}。"),
            ("{e}从{old}搬到了{v}。", "{e}离开{old}，搬去了{v}。", "{e}不在{old}了，现在住{v}。"),
            ("{e}现在住在哪里？", "{e}目前在哪个城市？", "{e}住在哪个城市", "{e}如今常驻哪里？"),
            ("{e}当时住在哪里？", "{e}那时候在哪个城市？", "{e}那会儿住哪"),
            ("{e}住过哪些城市？", "{e}搬家的经历", "{e}先后住在哪些城市"),
        ),
    ),
    Attribute(
        "employer", "person", "company", "zh_company", ("employer", "works at", "company", "job/company"),
        Phrasing(
            ("{e} works at {v}.", "{e} joined {v}.", "{e} is employed by {v}.", "{v} hired {e}.",
             "{e} is on the payroll of {v}.", "{e} took a job at {v}."),
            ("{e} left {old} to join {v}.", "{e} quit {old}; {e} works for {v} now.",
             "{e} switched employers from {old} to {v}.", "After {old}, {e} signed with {v}."),
            ("Who does {e} work for now?", "Which company employs {e}?", "{e}'s employer",
             "Where does {e} work these days?", "What company is {e} at?"),
            ("Who did {e} work for?", "Which company employed {e} then?", "Where was {e} working?",
             "{e}'s employer at that time"),
            ("Which companies has {e} worked for?", "{e}'s career, employer by employer",
             "All of {e}'s employers in order"),
        ),
        Phrasing(
            ("{e}在{v}工作。", "{e}加入了{v}。", "{e}入职{v}。", "{v}聘用了{e}。"),
            ("{e}从{old}离职，加入了{v}。", "{e}跳槽了，从{old}到{v}。", "{e}离开{old}后去了{v}。"),
            ("{e}现在在哪家公司工作？", "{e}目前的雇主是谁？", "{e}在哪里上班"),
            ("{e}当时在哪家公司？", "{e}那时在哪工作？"),
            ("{e}在哪些公司工作过？", "{e}的工作经历"),
        ),
    ),
    Attribute(
        "role", "person", ROLES, ZH_ROLES, ("role", "job title", "position", "title"),
        Phrasing(
            ("{e} is our {v}.", "{e}'s job title is {v}.", "{e} works as {v}.", "{e} was promoted to {v}.",
             "{e} now serves as {v}.", "The role {e} holds: {v}."),
            ("{e} went from {old} to {v}.", "{e} is no longer {old}; {e} is {v} now.",
             "{e} changed roles, {old} to {v}."),
            ("What is {e}'s role?", "What's {e}'s job title now?", "What position does {e} hold?",
             "{e} current title", "What does {e} do at work these days?"),
            ("What was {e}'s role?", "What title did {e} have then?", "Which position did {e} hold at the time?"),
            ("How has {e}'s role changed?", "{e}'s titles over time", "Every role {e} has had"),
        ),
        Phrasing(
            ("{e}是{v}。", "{e}的职位是{v}。", "{e}担任{v}。", "{e}升任{v}。"),
            ("{e}从{old}转为{v}。", "{e}不再是{old}，现在是{v}。"),
            ("{e}现在是什么职位？", "{e}目前担任什么角色？", "{e}的职位"),
            ("{e}当时是什么职位？", "{e}那时担任什么？"),
            ("{e}担任过哪些职位？", "{e}的职位变化"),
        ),
    ),
    Attribute(
        "editor", "person", EDITORS, EDITORS, ("editor", "ide", "code editor"),
        Phrasing(
            ("{e} uses {v} as their main editor.", "{e} writes code in {v}.", "{e}'s editor of choice is {v}.",
             "{e} switched to {v}.", "{v} is the IDE {e} works in."),
            ("{e} moved from {old} to {v}.", "{e} dropped {old} for {v}.", "{e} gave up on {old} and codes in {v} now."),
            ("Which editor does {e} use?", "What IDE is {e} on now?", "{e}'s code editor",
             "What does {e} write code in these days?"),
            ("Which editor did {e} use?", "What IDE was {e} using then?", "{e}'s editor at the time"),
            ("Which editors has {e} used?", "{e}'s editors over time", "Every IDE {e} has switched between"),
        ),
        Phrasing(
            ("{e}用{v}写代码。", "{e}的主力编辑器是{v}。", "{e}换成了{v}。"),
            ("{e}从{old}换到了{v}。", "{e}不用{old}了，改用{v}。"),
            ("{e}现在用什么编辑器？", "{e}用哪个IDE？"),
            ("{e}当时用什么编辑器？", "{e}那时用哪个IDE？"),
            ("{e}用过哪些编辑器？", "{e}编辑器的变化"),
        ),
    ),
    Attribute(
        "manager", "person", "person", "zh_person", ("manager", "reports to", "boss"),
        Phrasing(
            ("{e} reports to {v}.", "{v} is {e}'s manager.", "{e}'s manager is {v}.", "{v} manages {e}."),
            ("{e} now reports to {v} instead of {old}.", "{e}'s manager changed from {old} to {v}.",
             "{v} took over as {e}'s manager from {old}."),
            ("Who is {e}'s manager?", "Who does {e} report to now?", "{e}'s boss", "Who manages {e} at the moment?"),
            ("Who was {e}'s manager?", "Who did {e} report to then?", "{e}'s boss at that time"),
            ("Who have {e}'s managers been?", "Every manager {e} has reported to", "{e}'s reporting line over time"),
        ),
        Phrasing(
            ("{e}向{v}汇报。", "{v}是{e}的上级。", "{e}的经理是{v}。"),
            ("{e}的上级从{old}换成了{v}。", "{e}现在向{v}汇报，不再向{old}汇报。"),
            ("{e}的经理是谁？", "{e}现在向谁汇报？", "{e}的上级"),
            ("{e}当时向谁汇报？", "{e}那时的经理是谁？"),
            ("{e}先后有过哪些上级？", "{e}汇报关系的变化"),
        ),
    ),
    Attribute(
        "hq", "company", CITIES, ZH_CITIES, ("hq", "headquarters", "head office"),
        Phrasing(
            ("{e} is headquartered in {v}.", "The head office of {e} is in {v}.", "{e} has its HQ in {v}.",
             "{e} moved its headquarters to {v}.", "{v} is home to {e}'s headquarters."),
            ("{e} moved its headquarters from {old} to {v}.", "{e} left {old}; its HQ is in {v} now.",
             "{e} relocated the head office, {old} to {v}."),
            ("Where is {e} headquartered?", "Where is {e}'s head office now?", "{e} HQ city",
             "In which city does {e} have its headquarters?"),
            ("Where was {e} headquartered?", "Where was {e}'s head office then?", "{e}'s HQ at that time"),
            ("Where has {e} had its headquarters?", "{e}'s HQ moves", "Every city {e}'s head office has been in"),
        ),
        Phrasing(
            ("{e}总部位于{v}。", "{e}的总部在{v}。", "{e}把总部迁到了{v}。"),
            ("{e}总部从{old}迁到了{v}。", "{e}离开{old}，总部设在{v}。"),
            ("{e}的总部在哪里？", "{e}总部现在在哪个城市？"),
            ("{e}当时总部在哪？", "{e}那时的总部在哪个城市？"),
            ("{e}的总部迁过哪些城市？", "{e}总部搬迁历史"),
        ),
    ),
    Attribute(
        "ceo", "company", "person", "zh_person", ("ceo", "chief executive", "leader"),
        Phrasing(
            ("{v} is the CEO of {e}.", "{e} appointed {v} as chief executive.", "{e} is led by CEO {v}.",
             "{v} runs {e}.", "The chief executive of {e} is {v}."),
            ("{v} replaced {old} as CEO of {e}.", "{e}'s CEO is {v} now; {old} stepped down.",
             "{old} handed {e} over to {v} as CEO."),
            ("Who is the CEO of {e}?", "Who runs {e} now?", "{e}'s chief executive", "Who leads {e} at the moment?"),
            ("Who was the CEO of {e}?", "Who ran {e} then?", "{e}'s chief executive at that time"),
            ("Who have {e}'s CEOs been?", "Every chief executive of {e} in order", "{e}'s leadership changes"),
        ),
        Phrasing(
            ("{v}是{e}的CEO。", "{e}任命{v}为首席执行官。", "{e}由{v}掌舵。"),
            ("{v}接替{old}出任{e}的CEO。", "{e}的CEO从{old}换成了{v}。"),
            ("{e}的CEO是谁？", "现在谁在管理{e}？"),
            ("{e}当时的CEO是谁？", "那时谁领导{e}？"),
            ("{e}历任CEO有哪些？", "{e}的CEO变更"),
        ),
    ),
    Attribute(
        "price", "company", "price", "zh_price", ("plan price", "pricing", "price of plan"),
        Phrasing(
            ("{e}'s {p} plan costs {v}.", "{e} charges {v} for the {p} plan.", "The {p} tier at {e} is priced at {v}.",
             "{e} {p}: {v}.", "{e} set the {p} plan's price to {v}."),
            ("{e} changed the {p} plan from {old} to {v}.", "{e}'s {p} plan went from {old} to {v}.",
             "The {p} plan at {e} is {v} now, not {old}."),
            ("How much is {e}'s {p} plan?", "What does {e} charge for {p} now?", "{e} {p} plan price",
             "What's the current price of the {p} tier at {e}?"),
            ("How much was {e}'s {p} plan?", "What did {e} charge for {p} then?", "{e} {p} price at the time"),
            ("How has {e}'s {p} price changed?", "Every price of {e}'s {p} plan", "{e} {p} pricing history"),
        ),
        Phrasing(
            ("{e}的{p}售价{v}。", "{e}{p}的价格是{v}。", "{e}把{p}定价为{v}。"),
            ("{e}的{p}从{old}调整为{v}。", "{e}{p}价格由{old}改成{v}。"),
            ("{e}的{p}多少钱？", "{e}{p}现在什么价格？"),
            ("{e}的{p}当时多少钱？", "{e}{p}那时的价格"),
            ("{e}的{p}价格变化", "{e}{p}历次调价"),
        ),
        extra=PLANS, zh_extra=ZH_PLANS,
    ),
    Attribute(
        "cloud", "company", CLOUDS, CLOUDS, ("cloud", "cloud provider", "hosting"),
        Phrasing(
            ("{e} runs on {v}.", "{e} hosts everything on {v}.", "{e}'s cloud provider is {v}.",
             "{e} migrated its infrastructure to {v}."),
            ("{e} moved from {old} to {v}.", "{e} left {old} for {v}.", "{e} is on {v} now, after {old}."),
            ("Which cloud does {e} use?", "Where does {e} host its infrastructure now?", "{e} cloud provider"),
            ("Which cloud did {e} use?", "Where was {e} hosted then?", "{e}'s cloud provider at that time"),
            ("Which clouds has {e} used?", "{e}'s hosting history", "Every cloud provider {e} has been on"),
        ),
        Phrasing(
            ("{e}的服务部署在{v}上。", "{e}使用{v}作为云服务商。", "{e}迁移到了{v}。"),
            ("{e}从{old}迁移到了{v}。", "{e}不再用{old}，改用{v}。"),
            ("{e}用的是哪家云？", "{e}现在部署在哪个云上？"),
            ("{e}当时用哪家云？", "{e}那时托管在哪里？"),
            ("{e}用过哪些云服务商？", "{e}的云迁移历史"),
        ),
    ),
    Attribute(
        "version", "service", "version", "version", ("version", "deployed version", "release"),
        Phrasing(
            ("{e} is running version {v}.", "{e} was upgraded to {v}.", "We deployed {e} {v} to production.",
             "Production runs {e} {v}.", "{e} is on {v}."),
            ("{e} went from {old} to {v}.", "We upgraded {e} from {old} to {v}.", "{e} {v} replaced {old} in production."),
            ("Which version of {e} is in production?", "What version is {e} running now?", "{e} current version",
             "What release of {e} is deployed?"),
            ("Which version of {e} was in production?", "What version was {e} running then?",
             "{e} version at that time"),
            ("Which versions of {e} have we deployed?", "{e} release history", "Every version of {e} in production"),
        ),
        Phrasing(
            ("{e}运行的版本是{v}。", "{e}升级到了{v}。", "线上{e}版本为{v}。"),
            ("{e}从{old}升级到{v}。", "{e}的版本由{old}更新为{v}。"),
            ("{e}现在是哪个版本？", "线上{e}的版本"),
            ("{e}当时是哪个版本？", "那时线上{e}的版本"),
            ("{e}发布过哪些版本？", "{e}的版本历史"),
        ),
    ),
    Attribute(
        "database", "service", DATABASES, DATABASES, ("database", "db", "datastore", "storage backend"),
        Phrasing(
            ("{e} stores its data in {v}.", "{e} uses {v} as its database.", "The database behind {e} is {v}.",
             "{e} persists everything to {v}.", "We put {e} on {v}."),
            ("We moved {e} from {old} to {v}.", "{e} migrated off {old} onto {v}.", "{e} dropped {old}; it runs on {v} now."),
            ("Which database does {e} use?", "What is {e}'s datastore now?", "{e} database",
             "Where does {e} keep its data these days?"),
            ("Which database did {e} use?", "What was {e}'s datastore then?", "{e} database at that time"),
            ("Which databases has {e} used?", "{e} database migrations", "Every datastore {e} has run on"),
        ),
        Phrasing(
            ("{e}的数据存放在{v}。", "{e}使用{v}作为数据库。", "{e}底层数据库是{v}。"),
            ("{e}从{old}迁移到了{v}。", "{e}的数据库由{old}换成{v}。"),
            ("{e}用的是什么数据库？", "{e}现在的数据库"),
            ("{e}当时用什么数据库？", "{e}那时的数据库"),
            ("{e}用过哪些数据库？", "{e}数据库迁移历史"),
        ),
    ),
    Attribute(
        "gateway", "service", GATEWAYS, GATEWAYS, ("gateway", "api gateway", "proxy", "ingress"),
        Phrasing(
            ("{e} sits behind {v}.", "Traffic to {e} goes through {v}.", "The gateway in front of {e} is {v}.",
             "{e} is exposed through {v}."),
            ("We moved the gateway of {e} from {old} to {v}.", "{e} is behind {v} now, no longer {old}.",
             "{old} was replaced by {v} in front of {e}."),
            ("Which gateway is in front of {e}?", "What proxy does {e} sit behind now?", "{e} gateway",
             "What routes traffic to {e} these days?"),
            ("Which gateway was in front of {e}?", "What proxy did {e} sit behind then?", "{e} gateway at that time"),
            ("Which gateways has {e} been behind?", "{e} gateway history", "Every proxy in front of {e}"),
        ),
        Phrasing(
            ("{e}前面的网关是{v}。", "{e}的流量经过{v}。", "{e}通过{v}对外暴露。"),
            ("{e}的网关从{old}换成了{v}。", "{e}不再走{old}，改走{v}。"),
            ("{e}用的是什么网关？", "{e}现在的网关"),
            ("{e}当时用的什么网关？", "{e}那时的网关"),
            ("{e}换过哪些网关？", "{e}网关的变更历史"),
        ),
    ),
    Attribute(
        "owner", "service", "team", "zh_team", ("owner", "owning team", "maintainer"),
        Phrasing(
            ("{e} is owned by the {v} team.", "The {v} team maintains {e}.", "{e} belongs to the {v} team.",
             "Ownership of {e}: {v} team."),
            ("{e} moved from the {old} team to the {v} team.", "The {v} team took over {e} from {old}.",
             "{e} is the {v} team's now, no longer {old}'s."),
            ("Which team owns {e}?", "Who maintains {e} now?", "{e} owner", "Which team is responsible for {e}?"),
            ("Which team owned {e}?", "Who maintained {e} then?", "{e}'s owner at the time"),
            ("Which teams have owned {e}?", "{e} ownership history", "Every team that maintained {e}"),
        ),
        Phrasing(
            ("{e}归{v}负责。", "{e}由{v}维护。", "{v}负责{e}。"),
            ("{e}从{old}移交给了{v}。", "{v}接手了{old}的{e}。"),
            ("{e}归哪个组负责？", "现在谁维护{e}？"),
            ("{e}当时归哪个组？", "那时谁维护{e}？"),
            ("{e}先后归哪些组？", "{e}的归属变化"),
        ),
    ),
    Attribute(
        "region", "service", REGIONS, REGIONS, ("region", "deployment region", "aws region"),
        Phrasing(
            ("{e} is deployed in {v}.", "{e} runs in the {v} region.", "{e} lives in {v}.", "We host {e} in {v}."),
            ("{e} moved from {old} to {v}.", "{e} was redeployed from {old} into {v}."),
            ("Which region is {e} deployed in?", "Where does {e} run now?", "{e} region"),
            ("Which region was {e} deployed in?", "Where did {e} run then?", "{e} region at that time"),
            ("Which regions has {e} run in?", "{e} region moves"),
        ),
        Phrasing(
            ("{e}部署在{v}区域。", "{e}运行在{v}。"),
            ("{e}从{old}迁到了{v}。", "{e}的部署区域由{old}改为{v}。"),
            ("{e}部署在哪个区域？", "{e}现在在哪个区域运行？"),
            ("{e}当时部署在哪个区域？",),
            ("{e}在哪些区域部署过？",),
        ),
    ),
    Attribute(
        "lead", "project", "person", "zh_person", ("lead", "project lead", "owner", "led by"),
        Phrasing(
            ("{v} leads {e}.", "{e} is led by {v}.", "{v} is the lead of {e}.", "{v} took over {e}.",
             "{e}'s lead: {v}."),
            ("{v} took over {e} from {old}.", "{e} is led by {v} now; {old} stepped back.",
             "{old} handed {e} to {v}."),
            ("Who leads {e}?", "Who is in charge of {e} now?", "{e} lead", "Who runs {e} these days?"),
            ("Who led {e}?", "Who was in charge of {e} then?", "{e}'s lead at that time"),
            ("Who has led {e}?", "Every lead {e} has had", "{e} leadership over time"),
        ),
        Phrasing(
            ("{v}负责{e}。", "{e}由{v}牵头。", "{v}是{e}的负责人。"),
            ("{v}从{old}手里接过了{e}。", "{e}的负责人从{old}换成了{v}。"),
            ("{e}的负责人是谁？", "现在谁在负责{e}？"),
            ("{e}当时的负责人是谁？", "那时谁负责{e}？"),
            ("{e}先后由谁负责？", "{e}负责人变更"),
        ),
    ),
    Attribute(
        "status", "project", STATUSES, ZH_STATUSES, ("status", "phase", "stage"),
        Phrasing(
            ("{e} is in {v}.", "{e} moved to {v}.", "Status of {e}: {v}.", "{e} entered the {v} phase.",
             "{e} is now at the {v} stage."),
            ("{e} went from {old} to {v}.", "{e} left {old} and is in {v} now."),
            ("What is the status of {e}?", "Which phase is {e} in now?", "{e} status", "Where is {e} at?"),
            ("What was the status of {e}?", "Which phase was {e} in then?", "{e} status at that time"),
            ("Which phases has {e} been through?", "{e} status history", "Every stage {e} went through"),
        ),
        Phrasing(
            ("{e}处于{v}阶段。", "{e}进入了{v}。", "{e}目前状态：{v}。"),
            ("{e}从{old}进入了{v}。", "{e}的状态由{old}变为{v}。"),
            ("{e}现在是什么状态？", "{e}进展到哪个阶段了？"),
            ("{e}当时处于什么阶段？", "{e}那时的状态"),
            ("{e}经历了哪些阶段？", "{e}的状态变化"),
        ),
    ),
    Attribute(
        "budget", "project", "budget", "zh_budget", ("budget", "funding"),
        Phrasing(
            ("{e} has a budget of {v}.", "The budget for {e} is {v}.", "{e} was funded with {v}.", "{e} budget: {v}."),
            ("The budget of {e} went from {old} to {v}.", "{e}'s budget changed from {old} to {v}."),
            ("What is the budget of {e}?", "How much funding does {e} have now?", "{e} budget"),
            ("What was the budget of {e}?", "How much funding did {e} have then?", "{e} budget at that time"),
            ("How has {e}'s budget changed?", "{e} budget history"),
        ),
        Phrasing(
            ("{e}的预算是{v}。", "{e}获批预算{v}。"),
            ("{e}的预算从{old}调整为{v}。",),
            ("{e}的预算是多少？", "{e}现在有多少预算？"),
            ("{e}当时的预算是多少？",),
            ("{e}预算的变化",),
        ),
    ),
    Attribute(
        "language", "project", LANGUAGES, LANGUAGES, ("language", "stack", "implementation language"),
        Phrasing(
            ("{e} is written in {v}.", "{e} was rewritten in {v}.", "The code of {e} is {v}.", "We build {e} in {v}."),
            ("{e} was ported from {old} to {v}.", "{e} moved from {old} to {v}."),
            ("What language is {e} written in?", "Which language is {e} built with now?", "{e} language"),
            ("What language was {e} written in?", "Which language was {e} built with then?"),
            ("Which languages has {e} been written in?", "{e} rewrites over time"),
        ),
        Phrasing(
            ("{e}用{v}编写。", "{e}改用{v}重写了。"),
            ("{e}从{old}迁移到了{v}。",),
            ("{e}是用什么语言写的？", "{e}现在用什么语言？"),
            ("{e}当时用什么语言写的？",),
            ("{e}用过哪些语言？",),
        ),
    ),
)
KINDS = ("person", "company", "service", "project")

NOTES_EN = (
    "{p} prefers {drink} in the morning.", "The {team} team retro is on {day}s.", "{p} is allergic to {food}.",
    "We decided to postpone the {feature} launch.", "Bug: {svc} returns 502 when the cache is cold.",
    "{p} is learning {hobby} on weekends.", "Reminder: renew the TLS certificate before {month}.",
    "{p} asked for the {feature} demo to be recorded.", "The {team} team's offsite will be in {city}.",
    "{p} recommended reading the SRE book.", "Standup moved to 9:45 on {day}s.",
    "{svc} had an incident: the disk filled up overnight.", "{p} and {p2} are pairing on {feature}.",
    "Customers keep asking for {feature}.", "{p} will be on holiday for two weeks.",
    "The quarterly planning doc is in the shared drive.", "{p} likes {hobby} and {drink}.",
    "{svc} latency doubled after the last deploy; rolled back.", "Lunch-and-learn on {day}: {p} presents {feature}.",
    "{p} visited {city} for a conference.", "Never deploy {svc} on {day} afternoons.",
)
NOTES_ZH = (
    "{p}早上喜欢喝咖啡。", "{team}每周{wd}开复盘会。", "{p}对花生过敏。", "我们决定推迟上线新功能。",
    "{svc}在缓存冷启动时会报错。", "{p}周末在学{hobby_zh}。", "记得在月底前续签证书。", "{p}去{city}出差开会。",
    "{p}和{p2}一起结对开发。", "客户一直在要导出功能。", "{p}下周休假两周。", "季度规划文档在共享盘里。",
)
HOBBIES_ZH = ("书法", "摄影", "跑步", "围棋", "烘焙", "游泳", "吉他")
ZH_WEEKDAYS = ("一", "二", "三", "四", "五")


# --------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Fact:
    fid: int
    chain: int
    version: int  # position in true time order, 0 = the oldest
    namespace: str
    text: str
    key: str  # as the agent writes it: the product normalises case and spacing
    valid_from: datetime


@dataclass(frozen=True)
class Chain:
    cid: int
    namespace: str
    lang: str
    kind: str
    entity: str
    attribute: str
    values: tuple[str, ...]
    facts: tuple[int, ...]  # fact ids, oldest first
    starts: tuple[datetime, ...]


@dataclass(frozen=True)
class Note:
    nid: int
    namespace: str
    text: str


@dataclass(frozen=True)
class Question:
    qid: int
    kind: str  # current | as_of | history
    chain: int
    namespace: str
    text: str
    as_of: str | None  # what is sent: an ISO datetime or a bare date
    expected: int | None  # the fact id top-1 should be (current, as_of)
    chain_newest_first: tuple[int, ...]  # history: every version, newest first
    boundary: bool = False  # as_of exactly at a version's valid_from
    bare_date: bool = False


@dataclass
class Corpus:
    seed: int
    namespaces: list[str]
    chains: list[Chain] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    arrival: list[tuple[str, int]] = field(default_factory=list)  # ("fact", fid) | ("note", nid), ingest order
    questions: list[Question] = field(default_factory=list)

    def digest(self) -> str:
        payload = json.dumps({"chains": [asdict(c) for c in self.chains], "facts": [asdict(f) for f in self.facts],
                              "notes": [asdict(n) for n in self.notes], "arrival": self.arrival,
                              "questions": [asdict(q) for q in self.questions]}, default=str, ensure_ascii=False)
        return hashlib.sha256(payload.encode()).hexdigest()

    def late_facts(self) -> int:
        """Facts that arrive after a newer version of their chain."""
        position = {item: i for i, item in enumerate(self.arrival)}
        late = 0
        for chain in self.chains:
            arrived = [position[("fact", fid)] for fid in chain.facts]
            late += sum(1 for i, at in enumerate(arrived) if any(later < at for later in arrived[i + 1:]))
        return late


NAMESPACE_POOL = ("acme-eng", "personal", "ops", "research", "sales", "family", "homelab", "startup", "consulting",
                  "platform-team", "client-work", "side-project", "infra", "hiring")


class _Names:
    """Distinct names per namespace and kind (an entity name means one entity in a namespace)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[tuple[str, str]] = set()

    def _draw(self, kind: str, lang: str) -> str:
        r = self.rng
        if lang == "zh":
            if kind == "person":
                return r.choice(ZH_SURNAMES) + r.choice(ZH_GIVEN)
            if kind == "company":
                return r.choice(ZH_COMPANY_HEAD) + r.choice(ZH_COMPANY_HEAD) + r.choice(ZH_COMPANY_TAIL)
            if kind == "service":
                return r.choice(ZH_SERVICE_HEAD) + r.choice(ZH_SERVICE_TAIL)
            return r.choice(ZH_PROJECT_WORDS) + r.choice(("项目", "计划", "工程"))
        if kind == "person":
            return f"{r.choice(FIRST)} {r.choice(LAST)}" if r.random() < 0.8 else r.choice(FIRST) + " " + r.choice(LAST)[0] + "."
        if kind == "company":
            word = "".join(r.choice(SYLLABLES) for _ in range(r.randint(2, 3))).capitalize()
            return word if r.random() < 0.3 else f"{word} {r.choice(COMPANY_SUFFIX)}"
        if kind == "service":
            return f"the {r.choice(SERVICE_HEAD)} {r.choice(SERVICE_TAIL)}" if r.random() < 0.7 else \
                f"{r.choice(SERVICE_HEAD)}-{r.choice(('api', 'svc', 'core', 'v2', 'edge'))}"
        return r.choice(PROJECT_FORMS).format(w=r.choice(PROJECT_WORDS))

    @staticmethod
    def _core(name: str, kind: str) -> str:
        """What tells two entities apart: a project's word ("Project Falcon" is "Falcon")."""
        if kind == "project":
            words = [w for w in name.split() if w in PROJECT_WORDS]
            if words:
                return words[0].casefold()
            if name.endswith(("项目", "计划", "工程")):
                return name[:-2]
        return name.removeprefix("the ").casefold()

    def new(self, namespace: str, kind: str, lang: str) -> str | None:
        for _ in range(50):
            name = self._draw(kind, lang)
            core = self._core(name, kind)
            if (namespace, core) not in self.used:
                self.used.add((namespace, core))
                return name
        return None


def _pool(name: str, rng: random.Random, count: int, exclude: str) -> list[str]:
    """``count`` distinct values of a generated pool (never the entity itself)."""
    out: list[str] = []
    tries = 0
    style = rng.randrange(5)  # one currency and form per chain
    while len(out) < count and tries < 1000:
        tries += 1
        if name == "person":
            value = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        elif name == "zh_person":
            value = rng.choice(ZH_SURNAMES) + rng.choice(ZH_GIVEN)
        elif name == "company":
            word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
            value = f"{word} {rng.choice(COMPANY_SUFFIX)}"
        elif name == "zh_company":
            value = rng.choice(ZH_COMPANY_HEAD) + rng.choice(ZH_COMPANY_HEAD) + rng.choice(ZH_COMPANY_TAIL)
        elif name == "team":
            value = rng.choice(TEAMS)
        elif name == "zh_team":
            value = rng.choice(ZH_TEAMS)
        elif name == "price":
            amount = rng.choice((9, 12, 15, 19, 25, 29, 39, 45, 49, 59, 79, 99, 129, 149, 199, 249))
            value = (f"${amount}/month", f"€{amount} per month", f"${amount} a month", f"£{amount}/mo",
                     f"${amount * 10} per year")[style]
        elif name == "zh_price":
            value = f"每月{rng.choice((39, 59, 88, 99, 128, 168, 199, 299, 399, 599))}元"
        elif name == "budget":
            value = (f"${rng.randint(5, 95) * 10}k", f"€{rng.randint(1, 9)}.{rng.randint(1, 9)}M",
                     f"${rng.randint(1, 4)}.{rng.randint(0, 9)} million")[style % 3]
        elif name == "zh_budget":
            value = f"{rng.randint(5, 900) * 10}万元"
        else:
            raise ValueError(name)
        if value not in out and value != exclude:
            out.append(value)
    return out


def _values(attr: Attribute, lang: str, rng: random.Random, count: int, entity: str) -> list[str]:
    pool = attr.zh_values if lang == "zh" else attr.values
    if pool == "version":
        major, minor, patch = rng.randint(0, 9), rng.randint(0, 20), rng.randint(0, 9)
        style = rng.choice(("v{}.{}.{}", "{}.{}.{}", "release {}.{}.{}"))
        out = []
        for _ in range(count):
            out.append(style.format(major, minor, patch))
            step = rng.random()
            if step < 0.2:
                major, minor, patch = major + 1, 0, 0
            elif step < 0.7:
                minor, patch = minor + rng.randint(1, 3), 0
            else:
                patch += rng.randint(1, 4)
        return out
    if isinstance(pool, str):
        return _pool(pool, rng, count, entity)
    return rng.sample(pool, min(count, len(pool)))


def _key(attr: Attribute, entity: str, lang: str, rng: random.Random) -> str:
    label = rng.choice(attr.key_labels)
    base = entity.removeprefix("the ")
    slug = "-".join(base.casefold().replace(".", "").replace("'", "").split())
    if lang == "zh":
        return rng.choice((f"{base}/{label}", f"{base} {label}", f"{base}:{attr.name}"))
    return rng.choice((f"{slug}/{label}", f"{base} {label}", f"{slug}:{label.replace(' ', '-')}", f"{base}'s {label}"))


def _respelt(key: str, rng: random.Random) -> str:
    """The same key as another call might spell it (case, spacing): the product normalises it."""
    choice = rng.random()
    if choice < 0.4:
        return key.upper() if key.isascii() else key
    if choice < 0.7:
        return f"  {key.replace(' ', '  ')} "
    return key.title()


def _date_phrase(when: datetime, lang: str, rng: random.Random) -> tuple[str, str]:
    """An optional date in the statement: (prefix, suffix)."""
    if lang == "zh":
        return rng.choice(((f"自{when.year}年{when.month}月起，", ""), (f"{when.year}年{when.month}月{when.day}日，", "")))
    month = MONTHS[when.month - 1]
    return rng.choice(((f"Since {month} {when.year}, ", ""), (f"As of {when:%Y-%m-%d}, ", ""),
                       ("", f" (since {when.day} {month} {when.year})"), (f"In {month} {when.year}: ", "")))


def _statement(attr: Attribute, chain_values: Sequence[str], version: int, entity: str, extra: str, lang: str,
               when: datetime, rng: random.Random) -> str:
    phr = attr.zh if lang == "zh" else attr.en
    use_change = version > 0 and rng.random() < 0.35
    template = rng.choice(phr.change if use_change else phr.first)
    text = template.format(e=entity, v=chain_values[version], old=chain_values[version - 1] if version else "",
                           p=extra)
    text = text[0].upper() + text[1:] if lang == "en" else text
    if rng.random() < 0.25:
        prefix, suffix = _date_phrase(when, lang, rng)
        if prefix:
            lower = lang == "en" and text.split(" ", 1)[0] in LOWER_AFTER_PREFIX
            text = prefix + (text[0].lower() + text[1:] if lower else text)
        elif suffix:
            text = text.rstrip(".") + suffix + "."
    return text


def _starts(count: int, rng: random.Random) -> list[datetime]:
    span = (LATEST_START - START).total_seconds()
    first = START + timedelta(seconds=rng.uniform(0, span))
    starts = [first]
    for _ in range(count - 1):
        starts.append(starts[-1] + timedelta(days=rng.randint(MIN_GAP_DAYS, MAX_GAP_DAYS), hours=rng.randint(0, 23),
                                             minutes=rng.randint(0, 59), seconds=rng.randint(0, 59)))
    if starts[-1] > END:  # squeeze into [START, END]
        scale = (END - first).total_seconds() / (starts[-1] - first).total_seconds()
        starts = [first + (s - first) * scale for s in starts]
    return [s.replace(microsecond=0) for s in starts]


def _question_text(attr: Attribute, kind: str, entity: str, extra: str, lang: str, when: datetime | None,
                   rng: random.Random) -> str:
    phr = attr.zh if lang == "zh" else attr.en
    pool = {"current": phr.current, "as_of": phr.past, "history": phr.history}[kind]
    text = rng.choice(pool).format(e=entity, p=extra)
    text = text[0].upper() + text[1:] if lang == "en" else text
    if kind == "as_of" and when is not None and rng.random() < 0.3:
        if lang == "zh":
            text = f"{when.year}年{when.month}月，" + text
        else:
            text = text.rstrip("?") + f" in {MONTHS[when.month - 1]} {when.year}?"
    return text


def generate(seed: int, *, facts: int = 2000, notes: int = 800, namespaces: int = 4, questions: int = 300) -> Corpus:
    """A corpus of at least ``facts`` facts, ``notes`` unrelated memories over ``namespaces``
    namespaces, and ``questions`` questions of each kind."""
    rng = random.Random(seed)
    names = _Names(rng)
    corpus = Corpus(seed=seed, namespaces=rng.sample(NAMESPACE_POOL, min(namespaces, len(NAMESPACE_POOL))))
    people: dict[str, list[str]] = {ns: [] for ns in corpus.namespaces}
    extras: dict[int, str] = {}
    by_kind = {kind: [a for a in ATTRIBUTES if a.kind == kind] for kind in KINDS}
    lengths = [n for n, _ in CHAIN_LENGTHS]
    weights = [w for _, w in CHAIN_LENGTHS]
    while len(corpus.facts) < facts:
        namespace = rng.choice(corpus.namespaces)
        kind = rng.choice(KINDS)
        lang = "zh" if rng.random() < CHINESE_SHARE else "en"
        entity = names.new(namespace, kind, lang)
        if entity is None:
            continue
        if kind == "person":
            people[namespace].append(entity)
        for attr in rng.sample(by_kind[kind], rng.randint(1, min(3, len(by_kind[kind])))):
            count = rng.choices(lengths, weights)[0]
            values = _values(attr, lang, rng, count, entity)
            count = len(values)
            starts = _starts(count, rng)
            cid = len(corpus.chains)
            extra = rng.choice(attr.zh_extra if lang == "zh" else attr.extra) if attr.extra else ""
            extras[cid] = extra
            key = _key(attr, entity, lang, rng)
            ids = []
            for version in range(count):
                fid = len(corpus.facts)
                text = _statement(attr, values, version, entity, extra, lang, starts[version], rng)
                spelt = _respelt(key, rng) if version and rng.random() < 0.2 else key
                corpus.facts.append(Fact(fid, cid, version, namespace, text, spelt, starts[version]))
                ids.append(fid)
            corpus.chains.append(Chain(cid, namespace, lang, kind, entity, attr.name, tuple(values), tuple(ids),
                                       tuple(starts)))
    corpus.notes = _notes(notes, corpus.namespaces, people, rng)
    corpus.arrival = _arrival(corpus, rng)
    corpus.questions = _questions(corpus, questions, extras, rng)
    return corpus


def _notes(count: int, namespaces: Sequence[str], people: dict[str, list[str]], rng: random.Random) -> list[Note]:
    notes: list[Note] = []
    seen: set[tuple[str, str]] = set()
    tries = 0
    while len(notes) < count and tries < count * 50:
        tries += 1
        namespace = rng.choice(namespaces)
        known = people[namespace]
        who = [rng.choice(known) if known and rng.random() < 0.5 else f"{rng.choice(FIRST)} {rng.choice(LAST)}"
               for _ in range(2)]
        zh = rng.random() < CHINESE_SHARE
        slots = {"p": who[0], "p2": who[1], "drink": rng.choice(DRINKS), "team": rng.choice(ZH_TEAMS if zh else TEAMS),
                 "day": rng.choice(WEEKDAYS), "food": rng.choice(FOODS), "feature": rng.choice(FEATURES),
                 "svc": f"the {rng.choice(SERVICE_HEAD)} {rng.choice(SERVICE_TAIL)}", "hobby": rng.choice(HOBBIES),
                 "month": rng.choice(MONTHS), "city": rng.choice(ZH_CITIES if zh else CITIES),
                 "hobby_zh": rng.choice(HOBBIES_ZH), "wd": rng.choice(ZH_WEEKDAYS)}
        if zh:
            slots["p"], slots["p2"] = (rng.choice(ZH_SURNAMES) + rng.choice(ZH_GIVEN) for _ in range(2))
            slots["svc"] = rng.choice(ZH_SERVICE_HEAD) + rng.choice(ZH_SERVICE_TAIL)
        text = rng.choice(NOTES_ZH if zh else NOTES_EN).format(**slots)
        if (namespace, text) in seen:
            continue
        seen.add((namespace, text))
        notes.append(Note(len(notes), namespace, text))
    return notes


def _arrival(corpus: Corpus, rng: random.Random) -> list[tuple[str, int]]:
    """Facts in time order, but LATE_SHARE of the older versions arrive after a newer one; notes
    spread over the whole span."""
    keyed: list[tuple[float, float, tuple[str, int]]] = []
    for chain in corpus.chains:
        for version, fid in enumerate(chain.facts):
            at = chain.starts[version].timestamp() + rng.uniform(0, 86400 * 3)
            if version < len(chain.facts) - 1 and rng.random() < LATE_SHARE / 0.75:  # ~3/4 of facts have a successor
                later = rng.randint(version + 1, len(chain.facts) - 1)
                at = chain.starts[later].timestamp() + rng.uniform(3600, 86400 * 20)
            keyed.append((at, rng.random(), ("fact", fid)))
    span = (START.timestamp(), END.timestamp())
    for note in corpus.notes:
        keyed.append((rng.uniform(*span), rng.random(), ("note", note.nid)))
    keyed.sort()
    return [item for _, _, item in keyed]


def end_of_day(day: datetime) -> datetime:
    return datetime.combine(day.date(), time(23, 59, 59, 999999), tzinfo=UTC)


def valid_at(chain: Chain, at: datetime) -> int | None:
    """The fact id valid at ``at`` ([valid_from, next valid_from)), or None before the first."""
    found = None
    for fid, start in zip(chain.facts, chain.starts, strict=True):
        if start <= at:
            found = fid
    return found


def _questions(corpus: Corpus, count: int, extras: dict[int, str], rng: random.Random) -> list[Question]:
    out: list[Question] = []
    attrs = {a.name: a for a in ATTRIBUTES}
    chains = corpus.chains
    changed = [c for c in chains if len(c.facts) > 1]

    def add(kind: str, chain: Chain, text: str, **fields: object) -> None:
        out.append(Question(len(out), kind, chain.cid, chain.namespace, text, chain_newest_first=tuple(reversed(chain.facts)),
                            **fields))  # type: ignore[arg-type]

    # current: every chain is asked about once before any is asked twice (a chain of one version included)
    order = [c for _ in range(count // max(1, len(chains)) + 1) for c in rng.sample(chains, len(chains))][:count]
    for chain in order:
        text = _question_text(attrs[chain.attribute], "current", chain.entity, extras[chain.cid], chain.lang, None, rng)
        add("current", chain, text, as_of=None, expected=chain.facts[-1])
    for _ in range(count):
        chain = rng.choice(changed)
        style = rng.random()
        if style < 0.12:  # the first instant of a later version: [valid_from, ...) includes it
            version = rng.randint(1, len(chain.facts) - 1)
            at, sent, bare = chain.starts[version], chain.starts[version].isoformat(), False
        elif style < 0.3:  # a bare date: the end of that day
            day = chain.starts[0] + timedelta(seconds=rng.uniform(0, (END - chain.starts[0]).total_seconds()))
            at, sent, bare = end_of_day(day), day.date().isoformat(), True
        else:
            at = chain.starts[0] + timedelta(seconds=rng.uniform(0, (END - chain.starts[0]).total_seconds()))
            at = at.replace(microsecond=0)
            sent = at.isoformat() if rng.random() < 0.7 else at.strftime("%Y-%m-%dT%H:%M:%SZ")
            bare = False
        text = _question_text(attrs[chain.attribute], "as_of", chain.entity, extras[chain.cid], chain.lang, at, rng)
        add("as_of", chain, text, as_of=sent, expected=valid_at(chain, at), boundary=style < 0.12, bare_date=bare)
    order = [c for _ in range(count // max(1, len(changed)) + 1) for c in rng.sample(changed, len(changed))][:count]
    for chain in order:
        text = _question_text(attrs[chain.attribute], "history", chain.entity, extras[chain.cid], chain.lang, None, rng)
        add("history", chain, text, as_of=None, expected=chain.facts[-1])
    return out


def describe(corpus: Corpus) -> dict[str, object]:
    from collections import Counter

    lengths = Counter(len(c.facts) for c in corpus.chains)
    return {
        "seed": corpus.seed, "digest": corpus.digest()[:16], "namespaces": corpus.namespaces,
        "chains": len(corpus.chains), "facts": len(corpus.facts), "notes": len(corpus.notes),
        "chinese_chains": sum(c.lang == "zh" for c in corpus.chains),
        "kinds": dict(Counter(c.kind for c in corpus.chains)), "attributes": dict(Counter(c.attribute for c in corpus.chains)),
        "chain_lengths": dict(sorted(lengths.items())), "late_facts": corpus.late_facts(),
        "questions": dict(Counter(q.kind for q in corpus.questions)),
        "distinct_fact_texts": len({(f.namespace, f.text) for f in corpus.facts}),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate (and print a sample of) bench/temporal.py's corpus.")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--facts", type=int, default=2000)
    parser.add_argument("--notes", type=int, default=800)
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--sample", type=int, default=12, help="facts and questions to print")
    parser.add_argument("--check", action="store_true", help="generate twice and compare (determinism per seed)")
    args = parser.parse_args(argv)
    sizes = {"facts": args.facts, "notes": args.notes, "namespaces": args.namespaces, "questions": args.questions}
    corpus = generate(args.seed, **sizes)
    print(json.dumps(describe(corpus), ensure_ascii=False, indent=1))
    rng = random.Random(0)
    for fact in rng.sample(corpus.facts, min(args.sample, len(corpus.facts))):
        print(f"  fact  [{fact.namespace}] {fact.valid_from:%Y-%m-%d} key={fact.key!r}: {fact.text}")
    for question in rng.sample(corpus.questions, min(args.sample, len(corpus.questions))):
        print(f"  {question.kind:8} [{question.namespace}] as_of={question.as_of}: {question.text}")
    if args.check:
        again = generate(args.seed, **sizes)
        other = generate(args.seed + 1, **sizes)
        same, differs = again.digest() == corpus.digest(), other.digest() != corpus.digest()
        print(f"determinism: same seed, same digest: {same}; seed+1 differs: {differs}")
        return 0 if same and differs else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
