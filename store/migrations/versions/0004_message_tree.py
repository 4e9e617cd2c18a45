"""Branches: each message names the one before it in its branch (``parent``), so a regenerated
reply or an edited message keeps the earlier version beside it; a chat names the last message of
the branch it shows (``shown``). Chats written before are one branch: each message's parent is
the one written before it."""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("messages", sa.Column("parent", ROW_ID, nullable=True))
    op.add_column("chats", sa.Column("shown", ROW_ID, nullable=True))
    op.execute("UPDATE messages SET parent = (SELECT max(earlier.id) FROM messages AS earlier "
               "WHERE earlier.chat_id = messages.chat_id AND earlier.id < messages.id)")


def downgrade() -> None:
    op.drop_column("chats", "shown")
    op.drop_column("messages", "parent")
