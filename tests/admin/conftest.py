"""What the admin's browser tests share: Debian's Chromium driven by Playwright, a page per test
that leaves a full-page screenshot named after the test, and the steps a curator takes in the
django-unfold console (log in, open the filters, read a read-only field, find a message).

Selectors are ids Django and unfold give the page (#id_<field>, #result_list, #changelist-filter,
#nav-sidebar, #link-<app>-<model>, #submit-row), roles, labels and accessible names, the console's
own ids (#bhg-*) and the few class names Django and unfold give a meaning (.errornote, .errorlist,
.field-<name>, .field-line, .readonly), never Tailwind's utility classes.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from playwright.sync_api import Browser, Locator, Page, Response, expect, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from memories import api_tokens

CHROMIUM = "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[2]
USERNAME, PASSWORD = "curator", "correct horse battery staple"
TIMEOUT_MS = 15_000
VIEWPORT = {"width": 1280, "height": 900}

Screenshot = Callable[..., Path]


def screenshot_dir() -> Path:
    """BHGBRAIN_SCREENSHOTS, or <repo>/test-artifacts/screenshots/ (ignored by git)."""
    path = Path(os.environ.get("BHGBRAIN_SCREENSHOTS") or REPO / "test-artifacts" / "screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _file_name(test_name: str, suffix: str = "") -> str:
    name = f"{test_name}-{suffix}" if suffix else test_name
    return re.sub(r"[^\w.-]+", "-", name).strip("-") + ".png"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium for the module. Playwright's sync API keeps an asyncio loop marked as running
    in this thread, so Django's async-safety check must be relaxed while the module runs."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"the admin browser tests need Debian's Chromium at {CHROMIUM} (apt-get install chromium); "
                    ".ci/run installs it and fails without it")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            yield chromium
            chromium.close()


@pytest.fixture
def screenshot(request: pytest.FixtureRequest) -> Screenshot:
    """``screenshot(page, "step")`` saves a full-page PNG named after the test (and the step)."""

    def save(page: Page, suffix: str = "") -> Path:
        path = screenshot_dir() / _file_name(request.node.name, suffix)
        page.wait_for_load_state()
        try:
            page.screenshot(path=str(path), full_page=True)
        except PlaywrightError:  # Chromium now and then refuses one capture while it lays the page out
            page.wait_for_timeout(300)
            page.screenshot(path=str(path), full_page=True)
        return path

    return save


@pytest.fixture
def page(browser: Browser, screenshot: Screenshot) -> Iterator[Page]:
    """A fresh browser context per test; whatever the outcome, the last page is kept as
    <screenshots>/<test name>.png."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    yield tab
    if not tab.is_closed():
        screenshot(tab)
    context.close()


@pytest.fixture
def curator() -> User:
    return User.objects.create_superuser(USERNAME, "curator@example.com", PASSWORD)


def client_for(user: User) -> Client:
    """Django's test client, logged in as ``user`` (the console's URL tests)."""
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def root() -> Client:
    """A superuser's test client."""
    return client_for(User.objects.create_superuser("root", "root@example.com", "pw"))


@pytest.fixture
def fresh_token_cache() -> Iterator[None]:
    """Whether scoped tokens exist is cached for 5 s per process: start and end with no cache,
    so no other test sees "auth required" after this test's token is gone."""
    api_tokens.reset_token_cache()
    yield
    api_tokens.reset_token_cache()


# --------------------------------------------------------------------------- a curator's steps


def submit_login(page: Page, base_url: str, username: str, password: str) -> Response | None:
    """Open the console, get sent to the login form, submit it; the response to the POST."""
    page.goto(f"{base_url}/admin/")
    expect(page).to_have_url(re.compile(r"/admin/login/\?next=/admin/$"))
    return submit_login_form(page, username, password)


def submit_login_form(page: Page, username: str, password: str) -> Response | None:
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    with page.expect_navigation() as navigation:
        page.locator("#login-form").get_by_role("button", name="Log in").click()
    return navigation.value


def log_in(page: Page, base_url: str, username: str = USERNAME, password: str = PASSWORD) -> None:
    """Log in and land on the dashboard, the user named in the sidebar."""
    submit_login(page, base_url, username, password)
    expect(page).to_have_url(f"{base_url}/admin/")
    expect(page.locator("#bhg-dashboard")).to_be_visible()
    expect(page.locator("#nav-sidebar")).to_contain_text(username)


def sidebar_link(page: Page, app: str, model: str) -> Locator:
    """The sidebar's link to a model's list (unfold's id: link-<app>-<model>)."""
    return page.locator(f"#nav-sidebar #link-{app}-{model}")


def message(page: Page, text: str | re.Pattern[str]) -> Locator:
    """The message (Django's messages framework) that says ``text``: unfold lists them in #main,
    above #content, as plain list items."""
    return page.locator("#main li").filter(has_text=text)


def save(page: Page) -> Response:
    """Click "Save" and return the response to the form's POST."""
    with page.expect_response(lambda response: response.request.method == "POST") as posted:
        page.locator("#submit-row").get_by_role("button", name="Save", exact=True).click()
    return posted.value


def form_error(page: Page) -> Locator:
    """A form's errors: the note above the form, a field's error list, or an error message."""
    return page.locator(".errornote, .errorlist")


def readonly_field(page: Page, label: str) -> Locator:
    """A read-only field's value on a change form, found by its label (unfold gives read-only
    fields no field-<name> class)."""
    row = page.locator("#content-main .field-line").filter(has=page.get_by_text(label, exact=True))
    return row.locator(".readonly")


def open_filters(page: Page) -> Locator:
    """unfold keeps the list filters in a panel behind the "Filters" button: open it."""
    page.locator("#changelist").get_by_text("Filters", exact=False).first.click()
    panel = page.locator("#changelist-filter")
    expect(panel).to_be_visible()
    return panel


def filter_choices(page: Page, title: str) -> list[str]:
    """The choices of one list filter ("By namespace") but its "All"."""
    panel = open_filters(page)
    group = panel.locator("div").filter(has=page.get_by_role("heading", name=title, exact=True)).last
    names = [text.strip() for text in group.get_by_role("link").all_inner_texts()]
    page.keyboard.press("Escape")
    return [name for name in names if name != "All"]


def result_ids(page: Page) -> set[str]:
    """The primary keys of the rows the change list shows, read from each row's link to its page
    (a list without actions has no checkboxes)."""
    hrefs = page.locator("#result_list tbody tr th a").evaluate_all("links => links.map(a => a.pathname)")
    return {match.group(1) for href in hrefs if (match := re.search(r"/([^/]+)/change/$", href))}


def results(page: Page) -> Locator:
    return page.locator("#result_list tbody tr")


def fill_tags(page: Page, tags: list[str] | str) -> None:
    """Type into the memory form's tags field, the one place that knows how: a list goes in as a
    JSON list, which the JSON field and the comma-separated tag field both read; a str is typed
    as it is (the invalid-input tests)."""
    page.fill("#id_tags", tags if isinstance(tags, str) else json.dumps(tags))
