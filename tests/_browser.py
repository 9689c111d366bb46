"""A real headless Chromium driven by selenium, for the tests that look at a page as a
person does. Without Chromium, its driver or selenium the test skips (fails under CI)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any, Iterator

from _services import missing

#: The flags Chromium needs here: headless, no sandbox (root), and none of the background
#: connections a closed network refuses.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


@contextlib.contextmanager
def chromium(profile: Path, window: tuple[int, int] = (1200, 1000)) -> Iterator[Any]:
    """A selenium driver of a headless Chromium with a profile in ``profile``; quit on exit."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        missing("headless Chromium is not installed: apt-get install -y chromium chromium-driver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing("selenium is not installed: pip install -e '.[test]'")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (*CHROMIUM_FLAGS, f"--window-size={window[0]},{window[1]}", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
