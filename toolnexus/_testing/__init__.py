"""What ``toolnexus.testing`` is built from: the streamed forms of scripted replies, the
scripted route, cassettes and the pytest plugin. Import them from ``toolnexus.testing``."""
