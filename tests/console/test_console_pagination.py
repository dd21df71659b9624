"""The address list of a space in pages, server side: `?page=N` with the `?q=` filter
kept, first/previous/next/last links, "N-M of T" (an en dash), on a narrow screen too.
The real page size is 50; a console with pages of 3 pages through the sample space (a
plan allows 50 addresses)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from enmesh.console.pagination import Page
from enmesh.console.runtime import Source
from tests.console.test_console_browser import ops
from tests.support.apply_target import stack_file
from tests.support.browser import click, log_in, text
from tests.support.console import Console, Http, save_screenshot, serve_console
from tests.support.mesh import Mesh

SIZE = 3
DASH = "\N{EN DASH}"


def test_pages_of_a_thousand() -> None:
    page = Page.of("3", 1000)
    assert (page.number, page.last, page.range_text) == (3, 20, f"101{DASH}150 of 1,000")
    assert page.items(range(1000)) == list(range(100, 150))
    assert page.links("a b") == {
        "first": "?page=1&q=a+b",
        "prev": "?page=2&q=a+b",
        "next": "?page=4&q=a+b",
        "last": "?page=20&q=a+b",
    }
    last = Page.of("20", 1000)
    assert last.range_text == f"951{DASH}1,000 of 1,000" and last.links()["next"] is None
    assert Page.of("999", 1001).number == 21 and Page.of("999", 1001).range_text.startswith("1,001")
    for asked in (None, "", "0", "-4", "two"):
        assert Page.of(asked, 1000).number == 1
    nothing = Page.of("2", 0)
    assert (nothing.number, nothing.range_text, nothing.items([])) == (1, "0 of 0", [])
    assert set(nothing.links().values()) == {None}


@pytest.fixture(scope="module")
def paged(mesh: Mesh) -> Iterator[Console]:
    with serve_console(mesh, page_size=SIZE) as served:
        yield served


def _addresses(mesh: Mesh, query: str = "") -> list[str]:
    tenant = next(t for t in Source.of(stack_file(mesh)).model().tenants if t.name == "iot")
    return [a.spec.address for a in tenant.addresses if query in a.spec.address]


def _shown(driver: Any) -> list[str]:
    rows = driver.find_elements(By.CSS_SELECTOR, "#addresses tbody tr")
    return [row.get_attribute("id").removeprefix("address-") for row in rows]


def test_page_through_the_addresses(driver: Any, paged: Console, mesh: Mesh) -> None:
    everything = _addresses(mesh)
    assert len(everything) > 2 * SIZE, "the sample space is too small to page through"
    log_in(driver, paged, *ops(mesh))
    assert _shown(driver) == everything[:SIZE]
    assert text(driver, "#page-range").startswith(f"1{DASH}{SIZE} of {len(everything)}")
    assert not driver.find_elements(By.ID, "page-prev")  # no page before the first
    seen = list(_shown(driver))
    while driver.find_elements(By.ID, "page-next"):
        click(driver, driver.find_element(By.ID, "page-next"))
        seen += _shown(driver)
    assert seen == everything  # each address once, in the model's order
    total = len(everything)
    assert text(driver, "#page-range").endswith(f"of {total} ({total} addresses)")
    click(driver, driver.find_element(By.ID, "page-first"))
    assert _shown(driver) == everything[:SIZE]
    click(driver, driver.find_element(By.ID, "page-last"))
    assert _shown(driver) == everything[-(len(everything) % SIZE or SIZE) :]
    click(driver, driver.find_element(By.ID, "page-prev"))
    assert driver.current_url.endswith(f"?page={-(-len(everything) // SIZE) - 1}")
    driver.set_window_size(390, 844)  # a phone: the links wrap, nothing wider than the screen
    try:
        driver.get(paged.url + "/spaces/iot?page=2")
        overflow = "return document.documentElement.scrollWidth - window.innerWidth"
        assert driver.execute_script(overflow) <= 0
        driver.execute_script("document.querySelector('nav.pager').scrollIntoView()")
        save_screenshot(driver, "pages-narrow")
    finally:
        driver.set_window_size(1200, 900)


def test_the_filter_is_server_side_and_keeps_its_pages(
    driver: Any, paged: Console, mesh: Mesh
) -> None:
    matching = _addresses(mesh, "t")
    assert len(matching) > SIZE
    log_in(driver, paged, *ops(mesh))
    driver.find_element(By.ID, "filter").send_keys("t")
    click(driver, driver.find_element(By.CSS_SELECTOR, "form.filter button"))
    assert _shown(driver) == matching[:SIZE]
    assert text(driver, "#page-range").startswith(f"1{DASH}{SIZE} of {len(matching)} matching “t”")
    assert "q=t" in driver.find_element(By.ID, "page-next").get_attribute("href")
    click(driver, driver.find_element(By.ID, "page-next"))
    assert _shown(driver) == matching[SIZE : 2 * SIZE]
    save_screenshot(driver, "pages-filtered")
    # Without JavaScript: plain requests get the same rows; a page past the end is the last.
    http = Http(paged)
    assert http.login(*ops(mesh)).status == 303
    page = http.request("GET", "/spaces/iot?q=t&page=99").read().decode()
    last = -(len(matching) % SIZE or SIZE)
    assert re.findall(r'<tr id="address-([^"]+)"', page) == matching[last:]
    nothing = http.request("GET", "/spaces/iot?q=no-such-thing").read().decode()
    assert "No address matches “no-such-thing”" in nothing and "0 of 0" in nothing
