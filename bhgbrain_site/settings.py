"""Django settings: one module, driven by config.json and environment variables."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from bhgbrain_site.core import sqlite_upkeep
from bhgbrain_site.core.config import ConfigError, data_dir_for, load_config, usable_directory
from bhgbrain_site.core.shared_cache import store_key

try:
    BHGBRAIN, BHGBRAIN_CONFIG_PATH = load_config()
    BHGBRAIN_DATA_DIR = usable_directory(data_dir_for(BHGBRAIN, BHGBRAIN_CONFIG_PATH), what="data directory")
    BHGBRAIN_LOG_DIR = usable_directory(BHGBRAIN_DATA_DIR / "logs", what="log directory")
except ConfigError as exc:
    raise ImproperlyConfigured(str(exc)) from None
BHGBRAIN_DEVICE_ID: str = BHGBRAIN.device.id or "unknown"


def _secret_key() -> str:
    """SECRET_KEY from env (or *_FILE), else a random key kept in data_dir."""
    if os.environ.get("DJANGO_SECRET_KEY"):
        return os.environ["DJANGO_SECRET_KEY"]
    if os.environ.get("DJANGO_SECRET_KEY_FILE"):
        return Path(os.environ["DJANGO_SECRET_KEY_FILE"]).read_text().strip()
    key_file = BHGBRAIN_DATA_DIR / "secret_key"
    if not key_file.exists():
        from django.core.management.utils import get_random_secret_key

        key_file.write_text(get_random_secret_key())
        key_file.chmod(0o600)
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = os.environ.get("BHGBRAIN_DEBUG") == "1"
ALLOWED_HOSTS = ["*"]  # the bind address is the guard (loopback by default)

INSTALLED_APPS = [
    "unfold",  # the governance console's theme (bundled assets, no CDN); before django.contrib.admin
    "unfold.contrib.filters",
    "bhgbrain_site.admin_app.AdminConfig",  # django.contrib.admin; a stdio server skips the admin modules
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "axes",  # admin login throttling
    "memories",
    "categories",
    "retention",
    "search",
    "mcp_bridge",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "bhgbrain_site.server.static_files.StaticFilesMiddleware",  # WhiteNoise, without leaving the event loop
    "bhgbrain_site.server.security.bearer_auth_middleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks
]

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses a locked-out username/address before checking the password
    "django.contrib.auth.backends.ModelBackend",
]
# Admin login throttling: after 5 failures for a username from one address, that pair waits an hour.
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = 1  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
AXES_LOCKOUT_TEMPLATE = "admin/lockout.html"

ROOT_URLCONF = "bhgbrain_site.urls"
ASGI_APPLICATION = "bhgbrain_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # the governance console (dashboard, review queue, merges, overrides): package data of
        # bhgbrain_site, so an installed wheel has them wherever it runs; before the apps' own
        # templates, so they override unfold's and django.contrib.admin's
        "DIRS": [Path(__file__).resolve().parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _database() -> dict[str, Any]:
    """DATABASE_URL selects PostgreSQL; otherwise SQLite (WAL, busy timeout) in data_dir."""
    url = os.environ.get("DATABASE_URL")
    if url:
        db = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
        if not db["ENGINE"].endswith(("postgresql", "sqlite3")):
            raise ImproperlyConfigured("DATABASE_URL must be a postgres:// or sqlite:// URL")
        return db
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": BHGBRAIN_DATA_DIR / "bhgbrain.sqlite3",
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            # wal_autocheckpoint: checkpoints run in a background thread (sqlite_wal); this is the net.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000; "
                            f"PRAGMA wal_autocheckpoint={sqlite_upkeep.AUTOCHECKPOINT_PAGES};",
        },
        "TEST": {"NAME": str(BHGBRAIN_DATA_DIR / "test.sqlite3")},
    }


DATABASES = {"default": _database()}
BHGBRAIN_STORE_KEY = store_key(DATABASES["default"])


def _workers() -> int:
    """Worker processes of the HTTP server: BHGBRAIN_WORKERS (what `server start --workers`
    passes to its workers) beats transport.http.workers."""
    raw = os.environ.get("BHGBRAIN_WORKERS")
    if not raw:
        return BHGBRAIN.transport.http.workers
    if not raw.isdigit() or not 1 <= int(raw) <= 64:
        raise ImproperlyConfigured("BHGBRAIN_WORKERS must be a whole number from 1 to 64")
    return int(raw)


BHGBRAIN_WORKERS = _workers()
# Redis (rate limits, the scheduler's queue) when configured: env REDIS_URL beats config redis_url.
REDIS_URL = os.environ.get("REDIS_URL") or BHGBRAIN.redis_url
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured("redis_url (or REDIS_URL) must be a redis://, rediss:// or unix:// URL")


def _redis_cache() -> dict[str, Any]:
    return {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": f"bhgbrain:{BHGBRAIN_STORE_KEY}",
        "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient", "SOCKET_CONNECT_TIMEOUT": 5, "SOCKET_TIMEOUT": 5},
    }


def _caches() -> dict[str, Any]:
    """``ratelimit`` counts requests per client (bhgbrain_site.server.security): in Redis when configured;
    with several workers and no Redis in a counter file in data_dir shared by the workers (SQLite:
    every worker is on this host) or in the database (PostgreSQL, whose servers may be on several
    hosts: a counter-safe database cache, table ``bhgbrain_cache``, created by every migrate); one
    process keeps it in memory as before."""
    local = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    if REDIS_URL:
        return {"default": _redis_cache(), "ratelimit": _redis_cache()}
    if BHGBRAIN_WORKERS > 1 and DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        # the workers of one host: a counter file, off the store's one write lock (core/shared_cache.py);
        # the file is the store's own (data_dir)
        shared = {"BACKEND": "bhgbrain_site.core.shared_cache.SharedCounterCache",
                  "LOCATION": str(BHGBRAIN_DATA_DIR / "ratelimit.counters"), "KEY_PREFIX": "bhgbrain"}
        return {"default": local, "ratelimit": shared}
    if BHGBRAIN_WORKERS > 1:
        shared = {"BACKEND": "bhgbrain_site.core.shared_cache.CounterDatabaseCache", "LOCATION": "bhgbrain_cache",
                  "KEY_PREFIX": "bhgbrain", "OPTIONS": {"MAX_ENTRIES": 100_000}}
        return {"default": local, "ratelimit": shared}
    return {"default": local, "ratelimit": {**local, "LOCATION": "ratelimit"}}


CACHES = _caches()
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# The governance console (django-unfold): branding, the dashboard, the sidebar.
UNFOLD = {
    "SITE_TITLE": "BHGBrain",
    "SITE_HEADER": "BHGBrain",
    "SITE_SUBHEADER": "Memory governance",
    "SITE_SYMBOL": "psychology",
    "SITE_URL": "/admin/",
    "SHOW_VIEW_ON_SITE": False,
    "DASHBOARD_CALLBACK": "retention.admin.dashboard_callback",
    "SIDEBAR": {"show_search": True, "show_all_applications": True},
}

STATIC_URL = "static/"
STATIC_ROOT = BHGBRAIN_DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = True  # admin and Swagger UI assets straight from the installed apps
WHITENOISE_AUTOREFRESH = False

DATA_UPLOAD_MAX_MEMORY_SIZE = BHGBRAIN.security.max_request_size_bytes

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Access is decided by bhgbrain_site.server.security (bearer / scoped tokens) before DRF runs.
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "bhgbrain_site.rest.exception_handler",
    "DEFAULT_PARSER_CLASSES": ["bhgbrain_site.core.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "BHGBrain API",
    "DESCRIPTION": "Persistent memory for AI agents. Every endpoint but /health needs "
                   "`Authorization: Bearer <token>` when a token is configured.",
    "VERSION": "0.1.0",
    "OAS_VERSION": "3.1.0",  # the tool models' optional fields use JSON Schema's null type
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",  # bundled assets: no CDN needed
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "APPEND_COMPONENTS": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    "SECURITY": [{"bearer": []}],
    # the tiers appear as `tier` in the inputs and as `retention_tier` in the results: one enum
    "ENUM_NAME_OVERRIDES": {"TierEnum": "bhgbrain_site.core.contracts.TIERS"},
}

# The scheduler's queue: Redis when configured (named after the store, so two stores on one
# Redis never take each other's tasks), else the database (django-q2's ORM broker).
Q_CLUSTER = {
    **({"name": f"bhgbrain-{BHGBRAIN_STORE_KEY}", "redis": REDIS_URL} if REDIS_URL else {"name": "bhgbrain", "orm": "default"}),
    "workers": 1,
    "timeout": 600,
    "retry": 900,
    "catch_up": False,
    "sync": os.environ.get("BHGBRAIN_Q_SYNC") == "1",
}

_LOG_LEVELS = {"debug": "DEBUG", "info": "INFO", "warn": "WARNING", "error": "ERROR"}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "bhgbrain_site.core.log_format.JsonFormatter"},
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "filters": {"redact": {"()": "bhgbrain_site.core.log_format.RedactFilter"},
                "stateless_noise": {"()": "bhgbrain_site.core.log_format.StatelessNoiseFilter"}},
    "handlers": {
        # stderr only: stdout is reserved for the MCP stdio protocol.
        "stderr": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stderr",
            "formatter": "json" if BHGBRAIN.observability.structured_logging else "plain",
            "filters": ["redact"],
        },
        "file": {
            "class": "logging.handlers.RotatingFileHandler",
            "filename": str(BHGBRAIN_LOG_DIR / "bhgbrain.log"),
            "maxBytes": 10 * 1024 * 1024,
            "backupCount": 3,
            "formatter": "json" if BHGBRAIN.observability.structured_logging else "plain",
            "filters": ["redact"],
        },
    },
    "root": {"handlers": ["stderr", "file"], "level": _LOG_LEVELS[BHGBRAIN.observability.log_level]},
    "loggers": {"django.db.backends": {"level": "INFO"}, "axes": {"level": "WARNING"},
                "mcp.server.streamable_http": {"filters": ["stateless_noise"]}},
}
