"""Pydantic models of the events the governor accepts."""
