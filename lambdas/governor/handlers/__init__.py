"""One thin module per Lambda function: parse the event, call the domain, record, act."""
