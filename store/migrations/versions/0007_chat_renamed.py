"""When a chat was last renamed, so that a tab asks whether its list changed in one row
(ChatStore.list_stamp) rather than reading the list every few seconds."""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chats") as batch:
        batch.add_column(sa.Column("renamed", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chats") as batch:
        batch.drop_column("renamed")
