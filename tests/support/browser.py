"""Steps a user takes in the console, in a Selenium-driven browser: shared by the console's
own browser tests (tests/console) and the running stack's (tests/e2e/test_console.py)."""

from __future__ import annotations

from typing import Any

from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.support.console import Console


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
