"""The transaction coordinator: state machine, ``__transaction_state`` records, broker service."""
