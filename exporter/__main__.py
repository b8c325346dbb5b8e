"""``python -m exporter`` does what the ``podresources-exporter`` script does."""

from exporter.cli import main

if __name__ == "__main__":
    main()
