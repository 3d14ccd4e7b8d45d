"""The example site's project package: settings, URLs, the WSGI entry point."""
