"""Steps a user takes in the console, in a Selenium-driven browser: shared by the console's
own browser tests (tests/console) and the running stack's (tests/e2e/test_console.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.support.console import Console, browser, save_screenshot


def chromium_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A fixture's body: one headless Chromium, quit when the fixture's scope ends."""
    chromium = browser(tmp_path_factory.mktemp("chromium"))
    try:
        yield chromium
    finally:
        chromium.quit()


def log_in(driver: Any, console: Console, username: str, password: str) -> None:
    driver.delete_all_cookies()
    driver.get(console.url + "/login")
    driver.find_element(By.ID, "username").send_keys(username)
    driver.find_element(By.ID, "password").send_keys(password)
    click(driver, driver.find_element(By.ID, "login"))


def click(driver: Any, element: Any) -> None:
    """Click, then wait for the next page (a form's POST may apply: seconds)."""
    driver.execute_script("window.enmeshOldPage = true")  # gone once the next page loads
    element.click()
    WebDriverWait(driver, 60, ignored_exceptions=[WebDriverException]).until(
        lambda d: d.execute_script(
            "return document.readyState === 'complete' && !window.enmeshOldPage"
        )
    )


def text(driver: Any, selector: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, selector).text)


def new_address(driver: Any, console: Console, *, space: str = "iot", **fields: str) -> None:
    """The new-address form of `space`, filled with `fields` (element id: value), sent."""
    driver.get(f"{console.url}/spaces/{space}/addresses/new")
    for name, value in fields.items():
        element = driver.find_element(By.ID, name)
        if element.tag_name == "select":
            Select(element).select_by_value(value)
        else:
            element.clear()
            element.send_keys(value)
    click(driver, driver.find_element(By.ID, "create"))


def new_user(
    driver: Any,
    console: Console,
    username: str,
    operations: list[str],
    addresses: str,
    *,
    space: str = "iot",
) -> None:
    """The new-user form: its name, the operations ticked, the address patterns, sent."""
    driver.get(f"{console.url}/spaces/{space}/users/new")
    driver.find_element(By.ID, "username").send_keys(username)
    for operation in operations:
        driver.find_element(By.ID, f"op-{operation}").click()
    driver.find_element(By.ID, "addresses").send_keys(addresses)
    click(driver, driver.find_element(By.ID, "create"))


def close_connection(driver: Any, console: Console, identity: str, rows: str, shot: str) -> None:
    """As the administrator: on the connections page, `identity`'s one connection among the
    rows `rows` (a CSS selector) is closed with its button; the page says so."""
    driver.get(console.url + "/spaces/iot/connections")
    found = driver.find_elements(By.CSS_SELECTOR, rows)
    mine = [row for row in found if row.get_attribute("data-user") == identity]
    assert len(mine) == 1, [row.text for row in found]
    save_screenshot(driver, shot)
    click(driver, mine[0].find_element(By.CSS_SELECTOR, "button.close"))
    assert "closed" in text(driver, ".flash")
