"""The local demo: a simulated GPU fleet on an in-process AWS emulator, driven through the real handlers."""
