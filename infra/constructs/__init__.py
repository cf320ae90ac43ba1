"""One construct per capability: trigger + function + role + log group + alarms."""
