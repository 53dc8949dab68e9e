"""The settings guard: a custom resource that fails a deploy unsafe over the stored state.

Its properties are the state settings (`StateSettings.properties`); on an update that changes
them CloudFormation hands the guard's handler (`settings_guard_function.handler`) the old and
the new ones, and a refused change fails the update, so CloudFormation rolls the stack back.
`protect` makes a function (and, through it, its event source mappings) depend on the guard:
CloudFormation updates it only after the guard accepted the settings, so no function ever runs
with refused settings, and a rollback never has to undo a function that did.

The CDK provider framework turns the handler's exception into a FAILED response carrying its
message (the handler sends no response itself). Its function is CDK's, with a role of our own
that only writes its log group and reads (`GetFunction`, to wait until it is active) and invokes
the guard function; the guard function's role writes its own log group (`PipelineFunction`) and
may `GetItem` on the AggregateTable (and use the data key through DynamoDB, with
`customerManagedKey`), its one AWS call: a Create reads the `#stats` item to tell a
new stack from one a release before the guard deployed (`first_guard_refusal`). The table's
name is a property, so the table is created before the guard, and the deploy's declaration that
the pipeline is drained (`upgradeDrained`) is one too.

Keep the construct ids: they make the guard's logical id, and a guard under a new logical id is
created, not updated, so that one deploy would go unchecked.
"""

from __future__ import annotations

from aws_cdk import CustomResource, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from aggregation.names import SETTINGS_GUARD_SERVICE, STATE_SETTINGS_GUARD_TYPE
from aggregation.setting_changes import AGGREGATE_TABLE_PROPERTY, UPGRADE_DRAINED
from stacks.encryption import StackKeys
from stacks.functions import PipelineFunction, SharedFunctionAssets
from stacks.settings import PipelineSettings


class SettingsGuard(Construct):
    """The guard resource, its handler and the provider framework that calls it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: PipelineSettings,
        assets: SharedFunctionAssets,
        aggregate_table: dynamodb.ITable,
        keys: StackKeys,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = PipelineFunction(
            self,
            "GuardFunction",
            settings=settings,
            assets=assets,
            service=SETTINGS_GUARD_SERVICE,
            handler="settings_guard_function.handler.lambda_handler",
            description="Fails a stack update whose settings the stored state would not survive",
            memory_size=128,
            timeout=Duration.seconds(30),
            environment={},
        )
        aggregate_table.grant(self.handler.function, "dynamodb:GetItem")
        keys.allow_roles([self.handler.role], ["dynamodb"], sid="SettingsGuardFunction")
        framework_logs = logs.LogGroup(
            self,
            "ProviderLogGroup",
            encryption_key=assets.log_key,
            retention=settings.log_retention,
            removal_policy=settings.removal_policy,
        )
        framework_role = iam.Role(
            self,
            "ProviderRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Execution role of the settings guard's custom resource provider",
        )
        framework_logs.grant_write(framework_role)
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.handler.function,
            framework_on_event_role=framework_role,
            log_group=framework_logs,
            provider_function_env_encryption=assets.environment_key,
        )
        self.framework_role = framework_role
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=self.provider.service_token,
            resource_type=STATE_SETTINGS_GUARD_TYPE,
            properties={
                **settings.state_settings.properties(),
                AGGREGATE_TABLE_PROPERTY: aggregate_table.table_name,
                **({UPGRADE_DRAINED: "true"} if settings.upgrade_drained else {}),
            },
        )
        guard_function = self.handler.function.node.default_child
        assert isinstance(guard_function, lambda_.CfnFunction)
        NagSuppressions.add_resource_suppressions(
            framework_role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    applies_to=[f"Resource::<{Stack.of(self).get_logical_id(guard_function)}.Arn>:*"],
                    reason=(
                        "The provider framework may invoke the guard function's versions and aliases "
                        "(CDK's grantInvoke adds '<function ARN>:*'); it is that one function, nothing else."
                    ),
                )
            ],
            apply_to_children=True,
        )

    def protect(self, *functions: lambda_.Function) -> None:
        """Update `functions` and their event source mappings only after the guard accepted the settings."""
        for function in functions:
            function.node.add_dependency(self.resource)
