"""Spark in these tests (sessions here, and the jobs they start) binds to loopback only:
without SPARK_LOCAL_IP it picks the host's first non-loopback address."""

import os

os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
